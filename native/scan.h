/* Client-protocol PUB/HPUB scanner: the parser's hot loop (twin: appliance/protocol/_scan_py.py). */
#ifndef APPLIANCE_SCAN_H
#define APPLIANCE_SCAN_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* scan_pubs(buf: bytes, pos: int, max_line: int, max_payload: int, out: list) -> int */
PyObject *appliance_scan_pubs(PyObject *self, PyObject *const *args, Py_ssize_t nargs);

/* scan_rmsgs(buf: bytes, pos: int, max_line: int, max_payload: int, out: list) -> int: plain RMSGs as runs
 * of PUB-shaped events (twin: appliance/protocol/_scan_py.py scan_rmsgs) */
PyObject *appliance_scan_rmsgs(PyObject *self, PyObject *const *args, Py_ssize_t nargs);

/* append_msg(out: bytearray, subject: bytes, tail: bytes, reply: bytes | None, header_size: int, data: bytes)
 * appends `MSG <subject><tail>[<reply> ]<len>\r\n<data>\r\n`, or HMSG with `<header_size> <len>` when
 * header_size >= 0 (twin: appliance/protocol/wire.py append_msg). */
PyObject *appliance_append_msg(PyObject *self, PyObject *const *args, Py_ssize_t nargs);

#define APPLIANCE_SCAN_METHODS                                                                  \
    {"scan_pubs", (PyCFunction)(void (*)(void))appliance_scan_pubs, METH_FASTCALL,             \
     "scan_pubs(buf, pos, max_line, max_payload, out) -> pos: consume complete PUB/HPUB ops"}, \
    {"scan_rmsgs", (PyCFunction)(void (*)(void))appliance_scan_rmsgs, METH_FASTCALL,           \
     "scan_rmsgs(buf, pos, max_line, max_payload, out) -> pos: consume complete plain RMSG ops"}, \
    {"append_msg", (PyCFunction)(void (*)(void))appliance_append_msg, METH_FASTCALL,           \
     "append_msg(out, subject, tail, reply, header_size, data): append one MSG/HMSG"},

#endif
