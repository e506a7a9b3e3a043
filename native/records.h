/* Message records of a MESSAGE frame between workers (twins: appliance/server/links.py). */
#ifndef APPLIANCE_RECORDS_H
#define APPLIANCE_RECORDS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* append_record(out: bytearray, account: bytes, subject: bytes, reply: bytes | None,
 *               queue: bytes | None, header_size: int (-1: none), data: bytes) -> None */
PyObject *appliance_append_record(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
/* decode_records(payload: bytes) -> list[(account, subject, reply, queue, header, data)] */
PyObject *appliance_decode_records(PyObject *self, PyObject *arg);

#define APPLIANCE_RECORD_METHODS                                                                  \
    {"append_record", (PyCFunction)(void (*)(void))appliance_append_record, METH_FASTCALL,       \
     "append_record(out, account, subject, reply, queue, header_size, data): one link record"},   \
    {"decode_records", (PyCFunction)appliance_decode_records, METH_O,                            \
     "decode_records(payload) -> list of (account, subject, reply, queue, header, data)"},

#endif
