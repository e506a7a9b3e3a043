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
/* record_runs(payload: bytes) -> list[(account, subject, queue, start, end, count)]: the records
 * grouped into runs of consecutive records with the same account, subject and queue. */
PyObject *appliance_record_runs(PyObject *self, PyObject *arg);
/* append_msgs(out: bytearray, payload: bytes, start: int, end: int, tail: bytes, headers: bool,
 *             limit: int) -> (count, next, data_bytes): MSG/HMSG lines for up to `limit` records of
 * payload[start:end] (HMSG only when headers is true; otherwise the header block is dropped). */
PyObject *appliance_append_msgs(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
/* append_relayed_msgs(out: bytearray, payload: bytes, start: int, end: int, tail: bytes, headers: bool,
 *                     limit: int) -> (count, next, data_bytes): as append_msgs for records relayed by
 * JetStream (appliance/jetstream/relay.py): each record's reply `<ack>@<stream subject>` is split at
 * its last '@'; the MSG/HMSG goes out on the stream subject with the ack as its reply (none when the
 * ack is empty). ValueError, and nothing appended, when a record has no '@' or no stream subject. */
PyObject *appliance_append_relayed_msgs(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
/* append_pub_records(out: bytearray, events: list, start: int, account: bytes, subject: bytes,
 *                    bytes_max: int) -> (count, data_bytes): one record per PUB event from
 * events[start] on while the subject stays `subject` and len(out) < bytes_max. */
PyObject *appliance_append_pub_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
/* append_pub_msgs(out: bytearray, events: list, start: int, subject: bytes, tail: bytes, limit: int)
 * -> (count, data_bytes): a MSG line (as append_msg) per PUB event from events[start] on while the
 * subject stays `subject`, at most `limit`: a burst for one local subscriber. */
PyObject *appliance_append_pub_msgs(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
/* count_pubs(events: list, start: int, subject: bytes, with_reply: bool) -> (count, data_bytes): the
 * PUB events from events[start] on while the subject stays `subject` (and, unless with_reply, while
 * they have no reply subject): a burst nobody subscribed to. */
PyObject *appliance_count_pubs(PyObject *self, PyObject *const *args, Py_ssize_t nargs);

#define APPLIANCE_RECORD_METHODS                                                                  \
    {"append_record", (PyCFunction)(void (*)(void))appliance_append_record, METH_FASTCALL,       \
     "append_record(out, account, subject, reply, queue, header_size, data): one link record"},   \
    {"decode_records", (PyCFunction)appliance_decode_records, METH_O,                            \
     "decode_records(payload) -> list of (account, subject, reply, queue, header, data)"},       \
    {"record_runs", (PyCFunction)appliance_record_runs, METH_O,                                  \
     "record_runs(payload) -> list of (account, subject, queue, start, end, count)"},            \
    {"append_msgs", (PyCFunction)(void (*)(void))appliance_append_msgs, METH_FASTCALL,           \
     "append_msgs(out, payload, start, end, tail, headers, limit) -> (count, next, data_bytes)"}, \
    {"append_relayed_msgs", (PyCFunction)(void (*)(void))appliance_append_relayed_msgs, METH_FASTCALL, \
     "append_relayed_msgs(out, payload, start, end, tail, headers, limit) -> (count, next, data_bytes)"}, \
    {"append_pub_records", (PyCFunction)(void (*)(void))appliance_append_pub_records, METH_FASTCALL, \
     "append_pub_records(out, events, start, account, subject, bytes_max) -> (count, data_bytes)"}, \
    {"append_pub_msgs", (PyCFunction)(void (*)(void))appliance_append_pub_msgs, METH_FASTCALL,   \
     "append_pub_msgs(out, events, start, subject, tail, limit[, op]) -> (count, data_bytes)"},          \
    {"count_pubs", (PyCFunction)(void (*)(void))appliance_count_pubs, METH_FASTCALL,             \
     "count_pubs(events, start, subject, with_reply) -> (count, data_bytes)"},

#endif
