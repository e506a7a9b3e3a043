/*
 * appliance._native: the CPython module over the plain C of the C files of native/.
 *
 * Each wrapper parses its arguments, checks them, and calls one plain C function; there is no
 * logic here and no Python object is retained between calls. Ring functions take a writable
 * buffer (an mmap, a bytearray) and the byte offset of a ring in it, so one mapping can hold many
 * rings. Later hot paths are added as more entries of `native_methods`.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>

#include "ring.h"
#include "scan.h"
#include "records.h"

/* A ring inside a caller's writable buffer, validated; release with ring_view_release. */
typedef struct {
    Py_buffer buffer;
    void *memory;
} ring_view;

static const char *ring_status_text(ring_status status) {
    switch (status) {
    case RING_OK: return "ok";
    case RING_ERROR_MAGIC: return "bad magic: not a ring";
    case RING_ERROR_VERSION: return "unsupported ring layout version";
    case RING_ERROR_CAPACITY: return "bad ring capacity";
    case RING_ERROR_SIZE: return "buffer too small for the ring";
    case RING_ERROR_CORRUPT: return "ring corrupt";
    }
    return "unknown ring status";
}

static int offset_from(PyObject *object, Py_ssize_t *offset) {
    *offset = PyLong_AsSsize_t(object);
    if (*offset == -1 && PyErr_Occurred()) return -1;
    if (*offset < 0) {
        PyErr_SetString(PyExc_ValueError, "ring offset must be >= 0");
        return -1;
    }
    return 0;
}

/* Acquires `buffer` writable and locates the ring at `offset`; `check` validates its header. */
static int ring_view_acquire(ring_view *view, PyObject *buffer, PyObject *offset_object, int check) {
    Py_ssize_t offset;
    if (offset_from(offset_object, &offset) < 0) return -1;
    if (PyObject_GetBuffer(buffer, &view->buffer, PyBUF_WRITABLE) < 0) return -1;
    if (offset > view->buffer.len - RING_HEADER_BYTES) {
        PyBuffer_Release(&view->buffer);
        PyErr_SetString(PyExc_ValueError, "ring offset beyond the buffer");
        return -1;
    }
    view->memory = (uint8_t *)view->buffer.buf + offset;
    if (((uintptr_t)view->memory & 7u) != 0u) {
        PyBuffer_Release(&view->buffer);
        PyErr_SetString(PyExc_ValueError, "ring must be 8-byte aligned");
        return -1;
    }
    if (check) {
        const ring_status status = ring_check(view->memory, (uint64_t)(view->buffer.len - offset));
        if (status != RING_OK) {
            PyBuffer_Release(&view->buffer);
            PyErr_SetString(PyExc_ValueError, ring_status_text(status));
            return -1;
        }
    }
    return 0;
}

static void ring_view_release(ring_view *view) { PyBuffer_Release(&view->buffer); }

static int arguments_exactly(Py_ssize_t given, Py_ssize_t wanted, const char *name) {
    if (given == wanted) return 0;
    PyErr_Format(PyExc_TypeError, "%s() takes %zd arguments (%zd given)", name, wanted, given);
    return -1;
}

static int u32_from(PyObject *object, uint32_t *value, const char *what) {
    const unsigned long long wide = PyLong_AsUnsignedLongLong(object);
    if (wide == (unsigned long long)-1 && PyErr_Occurred()) return -1;
    if (wide > UINT32_MAX) {
        PyErr_Format(PyExc_OverflowError, "%s does not fit a u32", what);
        return -1;
    }
    *value = (uint32_t)wide;
    return 0;
}

static PyObject *native_ring_region_bytes(PyObject *module, PyObject *capacity_object) {
    (void)module;
    const unsigned long long capacity = PyLong_AsUnsignedLongLong(capacity_object);
    if (capacity == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
    return PyLong_FromUnsignedLongLong(ring_region_bytes(capacity));
}

/* ring_init(buffer, offset, capacity, frame_bytes_max) -> None */
static PyObject *native_ring_init(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (arguments_exactly(nargs, 4, "ring_init") < 0) return NULL;
    const unsigned long long capacity = PyLong_AsUnsignedLongLong(args[2]);
    if (capacity == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
    if (capacity < RING_CAPACITY_MIN || capacity > RING_CAPACITY_MAX || (capacity & (capacity - 1u))) {
        PyErr_SetString(PyExc_ValueError, "ring capacity must be a power of two in [64, 2**31]");
        return NULL;
    }
    const unsigned long long frame_bytes_max = PyLong_AsUnsignedLongLong(args[3]);
    if (frame_bytes_max == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
    if (frame_bytes_max < 1u || frame_bytes_max > ring_frame_bytes_max(capacity)) {
        PyErr_SetString(PyExc_ValueError, "frame_bytes_max must be in [1, capacity / 4]");
        return NULL;
    }
    ring_view view;
    if (ring_view_acquire(&view, args[0], args[1], 0) < 0) return NULL;
    const uint64_t available = (uint64_t)(view.buffer.len - ((uint8_t *)view.memory - (uint8_t *)view.buffer.buf));
    if (available < ring_region_bytes(capacity)) {
        ring_view_release(&view);
        PyErr_SetString(PyExc_ValueError, "buffer too small for the ring");
        return NULL;
    }
    ring_init(view.memory, available, capacity, frame_bytes_max);
    ring_view_release(&view);
    Py_RETURN_NONE;
}

/* ring_check(buffer, offset) -> (capacity, frame_bytes_max); ValueError when no valid ring is there. */
static PyObject *native_ring_check(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (arguments_exactly(nargs, 2, "ring_check") < 0) return NULL;
    ring_view view;
    if (ring_view_acquire(&view, args[0], args[1], 1) < 0) return NULL;
    const uint64_t capacity = ((const ring_header *)view.memory)->capacity;
    const uint64_t frame_bytes_max = ((const ring_header *)view.memory)->frame_bytes_max;
    ring_view_release(&view);
    return Py_BuildValue("(KK)", (unsigned long long)capacity, (unsigned long long)frame_bytes_max);
}

/* Appends one payload object at *head (unpublished): 1 written, 0 full, -1 with an exception. */
static int append_one(void *memory, uint64_t *head, uint32_t kind, PyObject *payload_object) {
    Py_buffer payload;
    if (PyObject_GetBuffer(payload_object, &payload, PyBUF_SIMPLE) < 0) return -1;
    const ring_header *h = (const ring_header *)memory;
    if (kind == RING_KIND_WRAP || (uint64_t)payload.len > h->frame_bytes_max) {
        PyBuffer_Release(&payload);
        PyErr_SetString(PyExc_ValueError, kind == RING_KIND_WRAP ? "frame kind 0 is reserved"
                                                                 : "frame larger than the ring's maximum");
        return -1;
    }
    const int written = ring_append(memory, head, kind, payload.buf, (uint32_t)payload.len);
    PyBuffer_Release(&payload);
    return written;
}

/* ring_push(buffer, offset, kind, payload) -> 0 full | 1 pushed | 2 pushed, ring the doorbell */
static PyObject *native_ring_push(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (arguments_exactly(nargs, 4, "ring_push") < 0) return NULL;
    uint32_t kind;
    if (u32_from(args[2], &kind, "frame kind") < 0) return NULL;
    ring_view view;
    if (ring_view_acquire(&view, args[0], args[1], 1) < 0) return NULL;
    uint64_t head = ring_producer_head(view.memory);
    const int written = append_one(view.memory, &head, kind, args[3]);
    const ring_push_result result = written == 1 ? ring_publish(view.memory, head) : RING_FULL;
    ring_view_release(&view);
    if (written < 0) return NULL;
    return PyLong_FromLong((long)result);
}

/* ring_push_many(buffer, offset, frames, start) -> (next, wake): appends frames[start:] (a list of
 * (kind, payload) tuples) until one does not fit, publishes them at once; `next` is the index of
 * the first not sent. On an exception nothing is published. */
static PyObject *native_ring_push_many(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (arguments_exactly(nargs, 4, "ring_push_many") < 0) return NULL;
    if (!PyList_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "frames must be a list of (kind, payload) tuples");
        return NULL;
    }
    Py_ssize_t index = PyLong_AsSsize_t(args[3]);
    if (index == -1 && PyErr_Occurred()) return NULL;
    if (index < 0) {
        PyErr_SetString(PyExc_ValueError, "start must be >= 0");
        return NULL;
    }
    ring_view view;
    if (ring_view_acquire(&view, args[0], args[1], 1) < 0) return NULL;
    const uint64_t first = ring_producer_head(view.memory);
    uint64_t head = first;
    int failed = 0;
    for (; index < PyList_GET_SIZE(args[2]); index++) {
        PyObject *frame = PyList_GET_ITEM(args[2], index);
        if (!PyTuple_Check(frame) || PyTuple_GET_SIZE(frame) != 2) {
            PyErr_SetString(PyExc_TypeError, "frames must be a list of (kind, payload) tuples");
            failed = 1;
            break;
        }
        uint32_t kind;
        if (u32_from(PyTuple_GET_ITEM(frame, 0), &kind, "frame kind") < 0) {
            failed = 1;
            break;
        }
        const int written = append_one(view.memory, &head, kind, PyTuple_GET_ITEM(frame, 1));
        if (written < 0) failed = 1;
        if (written != 1) break;
    }
    const int wake = (!failed && head != first) ? ring_publish(view.memory, head) == RING_PUSHED_WAKE : 0;
    ring_view_release(&view);
    if (failed) return NULL;
    return Py_BuildValue("(nO)", index, wake ? Py_True : Py_False);
}

/* Appends one (kind, payload) tuple to `out`; -1 with an exception on failure. */
static int append_frame(PyObject *out, uint32_t kind, const uint8_t *payload, uint32_t length) {
    PyObject *kind_object = PyLong_FromUnsignedLong(kind);
    if (kind_object == NULL) return -1;
    PyObject *payload_object = PyBytes_FromStringAndSize((const char *)payload, (Py_ssize_t)length);
    if (payload_object == NULL) {
        Py_DECREF(kind_object);
        return -1;
    }
    PyObject *frame = PyTuple_New(2);
    if (frame == NULL) {
        Py_DECREF(kind_object);
        Py_DECREF(payload_object);
        return -1;
    }
    PyTuple_SET_ITEM(frame, 0, kind_object);
    PyTuple_SET_ITEM(frame, 1, payload_object);
    const int appended = PyList_Append(out, frame);
    Py_DECREF(frame);
    return appended;
}

/* ring_pop(buffer, offset, out, frames_max, bytes_max) -> (count, wake_writer): appends up to
 * frames_max (kind, payload) tuples to `out` (at least one frame when any is there, else stopping
 * before bytes_max payload bytes are exceeded), then frees them. */
static PyObject *native_ring_pop(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (arguments_exactly(nargs, 5, "ring_pop") < 0) return NULL;
    if (!PyList_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "out must be a list");
        return NULL;
    }
    const Py_ssize_t frames_max = PyLong_AsSsize_t(args[3]);
    if (frames_max == -1 && PyErr_Occurred()) return NULL;
    const Py_ssize_t bytes_max = PyLong_AsSsize_t(args[4]);
    if (bytes_max == -1 && PyErr_Occurred()) return NULL;
    if (frames_max < 1 || bytes_max < 1) {
        PyErr_SetString(PyExc_ValueError, "frames_max and bytes_max must be >= 1");
        return NULL;
    }
    ring_view view;
    if (ring_view_acquire(&view, args[0], args[1], 1) < 0) return NULL;
    uint64_t cursor = ring_consumer_cursor(view.memory);
    uint64_t head_seen = cursor;
    uint64_t bytes = 0;
    Py_ssize_t count = 0;
    while (count < frames_max) {
        const uint64_t before = cursor;
        uint32_t kind;
        const uint8_t *payload;
        uint32_t length;
        const int found = ring_peek(view.memory, &cursor, &head_seen, &kind, &payload, &length);
        if (found == 0) break;
        if (found < 0) {
            ring_view_release(&view);
            PyErr_Format(PyExc_RuntimeError, "ring corrupt at byte counter %llu", (unsigned long long)before);
            return NULL;
        }
        if (count > 0 && bytes + length > (uint64_t)bytes_max) {
            cursor = before; /* leave it for the next batch */
            break;
        }
        if (append_frame(args[2], kind, payload, length) < 0) {
            cursor = before;
            break;
        }
        bytes += length;
        count++;
    }
    const int wake = count > 0 ? ring_commit(view.memory, cursor, head_seen) : 0;
    ring_view_release(&view);
    if (PyErr_Occurred()) return NULL;
    return Py_BuildValue("(nO)", count, wake ? Py_True : Py_False);
}

/* ring_reader_sleep(buffer, offset) -> True: sleep, the producer rings; False: data arrived. */
static PyObject *native_ring_reader_sleep(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (arguments_exactly(nargs, 2, "ring_reader_sleep") < 0) return NULL;
    ring_view view;
    if (ring_view_acquire(&view, args[0], args[1], 1) < 0) return NULL;
    const int sleep = ring_reader_sleep(view.memory);
    ring_view_release(&view);
    return PyBool_FromLong(sleep);
}

/* ring_writer_wait(buffer, offset, payload_bytes) -> True: wait for the doorbell; False: space. */
static PyObject *native_ring_writer_wait(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (arguments_exactly(nargs, 3, "ring_writer_wait") < 0) return NULL;
    uint32_t payload_bytes;
    if (u32_from(args[2], &payload_bytes, "payload_bytes") < 0) return NULL;
    ring_view view;
    if (ring_view_acquire(&view, args[0], args[1], 1) < 0) return NULL;
    if (payload_bytes > ((const ring_header *)view.memory)->frame_bytes_max) {
        ring_view_release(&view);
        PyErr_SetString(PyExc_ValueError, "frame larger than the ring's maximum");
        return NULL;
    }
    const int wait = ring_writer_wait(view.memory, payload_bytes);
    ring_view_release(&view);
    return PyBool_FromLong(wait);
}

/* ring_counters(buffer, offset) -> (head, tail) */
static PyObject *native_ring_counters(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (arguments_exactly(nargs, 2, "ring_counters") < 0) return NULL;
    ring_view view;
    if (ring_view_acquire(&view, args[0], args[1], 1) < 0) return NULL;
    uint64_t head;
    uint64_t tail;
    ring_counters(view.memory, &head, &tail);
    ring_view_release(&view);
    return Py_BuildValue("(KK)", (unsigned long long)head, (unsigned long long)tail);
}

static PyMethodDef native_methods[] = {
    APPLIANCE_SCAN_METHODS
    APPLIANCE_RECORD_METHODS
    {"ring_region_bytes", native_ring_region_bytes, METH_O, "Bytes a ring of `capacity` occupies."},
    {"ring_init", (PyCFunction)(void (*)(void))native_ring_init, METH_FASTCALL, "Write an empty ring."},
    {"ring_check", (PyCFunction)(void (*)(void))native_ring_check, METH_FASTCALL, "Validate a ring."},
    {"ring_push", (PyCFunction)(void (*)(void))native_ring_push, METH_FASTCALL, "Append one frame."},
    {"ring_push_many", (PyCFunction)(void (*)(void))native_ring_push_many, METH_FASTCALL,
     "Append frames until one does not fit."},
    {"ring_pop", (PyCFunction)(void (*)(void))native_ring_pop, METH_FASTCALL, "Take a batch of frames."},
    {"ring_reader_sleep", (PyCFunction)(void (*)(void))native_ring_reader_sleep, METH_FASTCALL,
     "Consumer announces sleep."},
    {"ring_writer_wait", (PyCFunction)(void (*)(void))native_ring_writer_wait, METH_FASTCALL,
     "Producer announces it waits for space."},
    {"ring_counters", (PyCFunction)(void (*)(void))native_ring_counters, METH_FASTCALL,
     "Head and tail byte counters."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef native_module = {
    PyModuleDef_HEAD_INIT, "appliance._native", "Native hot paths of appliance (see native/).", -1,
    native_methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__native(void) {
    PyObject *module = PyModule_Create(&native_module);
    if (module == NULL) return NULL;
    PyObject *magic = PyLong_FromUnsignedLongLong(RING_MAGIC);
    if (magic == NULL || PyModule_AddObjectRef(module, "RING_MAGIC", magic) < 0) {
        Py_XDECREF(magic);
        Py_DECREF(module);
        return NULL;
    }
    Py_DECREF(magic);
    if (PyModule_AddIntConstant(module, "RING_HEADER_BYTES", RING_HEADER_BYTES) < 0 ||
        PyModule_AddIntConstant(module, "RING_RECORD_HEADER_BYTES", RING_RECORD_HEADER_BYTES) < 0 ||
        PyModule_AddIntConstant(module, "RING_VERSION", RING_VERSION) < 0 ||
        PyModule_AddIntConstant(module, "RING_KIND_WRAP", RING_KIND_WRAP) < 0 ||
        PyModule_AddIntConstant(module, "RING_CAPACITY_MIN", (long)RING_CAPACITY_MIN) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
