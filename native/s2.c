/* Stream backup helpers: S2/Snappy framing (appliance/store/s2frame.py is the reference) and
 * nats-server's backup archive entries (appliance/store/archive.py).
 *
 * crc32c(data, crc=0): CRC-32C (Castagnoli) as the framing format's chunk checksum needs it
 *   (before masking); slicing-by-8 tables.
 * s2_decode(block): the decoded bytes of one S2 (or Snappy) compressed block: a uvarint length,
 *   then literal and copy elements; S2's repeat (a copy-1 with offset 0 reuses the last offset).
 *   ValueError for anything malformed; the output never exceeds the declared length.
 * s2_encode(data): a greedy Snappy-compatible block of at most 64 KiB (literals, copy-1, copy-2),
 *   which every S2 and Snappy decoder reads.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define S2_BLOCK_MAX (4u << 20) /* the framing format's largest block (s2 maxBlockSize) */

static uint32_t crc32c_tables[8][256];

static void crc32c_tables_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc32c_tables[0][i] = c;
    }
    for (int t = 1; t < 8; t++) {
        for (int i = 0; i < 256; i++) {
            uint32_t prev = crc32c_tables[t - 1][i];
            crc32c_tables[t][i] = (prev >> 8) ^ crc32c_tables[0][prev & 0xFF];
        }
    }
}

static uint32_t crc32c_update(uint32_t crc, const uint8_t *p, size_t n) {
    uint32_t c = ~crc;
    while (n >= 8) {
        uint32_t one = ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24) ^ c;
        uint32_t two = (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16 | (uint32_t)p[7] << 24;
        c = crc32c_tables[7][one & 0xFF] ^ crc32c_tables[6][(one >> 8) & 0xFF] ^
            crc32c_tables[5][(one >> 16) & 0xFF] ^ crc32c_tables[4][one >> 24] ^
            crc32c_tables[3][two & 0xFF] ^ crc32c_tables[2][(two >> 8) & 0xFF] ^
            crc32c_tables[1][(two >> 16) & 0xFF] ^ crc32c_tables[0][two >> 24];
        p += 8;
        n -= 8;
    }
    while (n--) c = crc32c_tables[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
    return ~c;
}

static PyObject *native_crc32c(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "crc32c(data, crc=0)");
        return NULL;
    }
    uint32_t crc = 0;
    if (nargs == 2) {
        unsigned long value = PyLong_AsUnsignedLong(args[1]);
        if (PyErr_Occurred()) return NULL;
        crc = (uint32_t)value;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    uint32_t result;
    Py_BEGIN_ALLOW_THREADS
    result = crc32c_update(crc, (const uint8_t *)view.buf, (size_t)view.len);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(result);
}

static int read_uvarint(const uint8_t *src, size_t n, size_t *pos, uint64_t *out) {
    uint64_t value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (*pos >= n) return -1;
        uint8_t byte = src[(*pos)++];
        value |= (uint64_t)(byte & 0x7F) << shift;
        if (!(byte & 0x80)) {
            *out = value;
            return 0;
        }
    }
    return -1;
}

static uint32_t load_le(const uint8_t *p, int bytes) {
    uint32_t v = 0;
    for (int i = 0; i < bytes; i++) v |= (uint32_t)p[i] << (8 * i);
    return v;
}

/* Decode src into dst (exactly dst_len bytes); 0 on success, -1 if malformed. */
static int s2_decode_into(const uint8_t *src, size_t n, size_t s, uint8_t *dst, size_t dst_len) {
    size_t d = 0;
    size_t offset = 0;
    while (s < n) {
        uint8_t tag = src[s];
        size_t length;
        switch (tag & 0x03) {
        case 0: { /* literal */
            uint32_t x = tag >> 2;
            s++;
            if (x >= 60) {
                int extra = (int)x - 59;
                if (s + (size_t)extra > n) return -1;
                x = load_le(src + s, extra);
                s += (size_t)extra;
            }
            length = (size_t)x + 1;
            if (length > dst_len - d || length > n - s) return -1;
            memcpy(dst + d, src + s, length);
            d += length;
            s += length;
            continue;
        }
        case 1: { /* copy-1, or S2's repeat when its offset is 0 */
            if (s + 2 > n) return -1;
            size_t toffset = ((size_t)(tag & 0xE0) << 3) | src[s + 1];
            length = (tag >> 2) & 0x7;
            s += 2;
            if (toffset == 0) {
                if (length == 5) {
                    if (s + 1 > n) return -1;
                    length = (size_t)src[s] + 4;
                    s += 1;
                } else if (length == 6) {
                    if (s + 2 > n) return -1;
                    length = (size_t)load_le(src + s, 2) + (1u << 8);
                    s += 2;
                } else if (length == 7) {
                    if (s + 3 > n) return -1;
                    length = (size_t)load_le(src + s, 3) + (1u << 16);
                    s += 3;
                }
            } else {
                offset = toffset;
            }
            length += 4;
            break;
        }
        case 2: /* copy-2 */
            if (s + 3 > n) return -1;
            offset = load_le(src + s + 1, 2);
            length = 1 + (size_t)(tag >> 2);
            s += 3;
            break;
        default: /* copy-4 */
            if (s + 5 > n) return -1;
            offset = load_le(src + s + 1, 4);
            length = 1 + (size_t)(tag >> 2);
            s += 5;
            break;
        }
        if (offset == 0 || offset > d || length > dst_len - d) return -1;
        if (offset >= length) {
            memcpy(dst + d, dst + d - offset, length);
        } else {
            for (size_t i = 0; i < length; i++) dst[d + i] = dst[d - offset + i]; /* overlapping: forwards */
        }
        d += length;
    }
    return d == dst_len ? 0 : -1;
}

static PyObject *native_s2_decode(PyObject *module, PyObject *arg) {
    (void)module;
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    const uint8_t *src = (const uint8_t *)view.buf;
    size_t n = (size_t)view.len;
    size_t pos = 0;
    uint64_t length;
    if (read_uvarint(src, n, &pos, &length) < 0 || length > S2_BLOCK_MAX) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "s2: bad block length");
        return NULL;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)length);
    if (out == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    int rc = s2_decode_into(src, n, pos, (uint8_t *)PyBytes_AS_STRING(out), (size_t)length);
    PyBuffer_Release(&view);
    if (rc < 0) {
        Py_DECREF(out);
        PyErr_SetString(PyExc_ValueError, "s2: corrupt block");
        return NULL;
    }
    return out;
}


/* --- encoding: a greedy Snappy-compatible block (copies and literals; no S2 repeats) ------- */

#define S2_ENCODE_BLOCK_MAX 65536u /* blocks this small keep every offset within copy-2 */
#define HASH_BITS 14

static size_t put_uvarint(uint8_t *dst, uint64_t v) {
    size_t n = 0;
    while (v >= 0x80) {
        dst[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    dst[n++] = (uint8_t)v;
    return n;
}

static size_t emit_literal(uint8_t *dst, const uint8_t *lit, size_t len) {
    size_t n = 0, x = len - 1;
    if (x < 60) {
        dst[n++] = (uint8_t)(x << 2);
    } else if (x < 256) {
        dst[n++] = 60 << 2;
        dst[n++] = (uint8_t)x;
    } else {
        dst[n++] = 61 << 2; /* len <= 65536: two bytes suffice */
        dst[n++] = (uint8_t)x;
        dst[n++] = (uint8_t)(x >> 8);
    }
    memcpy(dst + n, lit, len);
    return n + len;
}

static size_t emit_copy2(uint8_t *dst, size_t offset, size_t len) {
    dst[0] = (uint8_t)(0x02 | ((len - 1) << 2));
    dst[1] = (uint8_t)offset;
    dst[2] = (uint8_t)(offset >> 8);
    return 3;
}

static size_t emit_copy(uint8_t *dst, size_t offset, size_t len) {
    size_t n = 0;
    while (len >= 68) {
        n += emit_copy2(dst + n, offset, 64);
        len -= 64;
    }
    if (len > 64) {
        n += emit_copy2(dst + n, offset, 60);
        len -= 60;
    }
    if (len >= 12 || offset >= 2048) return n + emit_copy2(dst + n, offset, len);
    dst[n++] = (uint8_t)(0x01 | ((len - 4) << 2) | ((offset >> 8) << 5));
    dst[n++] = (uint8_t)offset;
    return n;
}

static uint32_t hash4(uint32_t v) { return (v * 0x1E35A7BDu) >> (32 - HASH_BITS); }

/* Encode src (at most S2_ENCODE_BLOCK_MAX bytes) into dst; returns the encoded length. dst must
 * hold 32 + len + len / 6 bytes (Snappy's MaxEncodedLen). */
static size_t s2_encode_block(const uint8_t *src, size_t len, uint8_t *dst) {
    size_t d = put_uvarint(dst, len);
    if (len < 16) return d + (len ? emit_literal(dst + d, src, len) : 0);
    uint32_t table[1 << HASH_BITS];
    memset(table, 0, sizeof table);
    size_t lit = 0, i = 1, limit = len - 4;
    uint32_t skip = 32;
    table[hash4(load_le(src, 4))] = 0;
    while (i <= limit) {
        uint32_t here = load_le(src + i, 4);
        uint32_t h = hash4(here);
        size_t candidate = table[h];
        table[h] = (uint32_t)i;
        if (candidate < i && load_le(src + candidate, 4) == here) {
            size_t match = 4;
            while (i + match < len && src[candidate + match] == src[i + match]) match++;
            if (i > lit) d += emit_literal(dst + d, src + lit, i - lit);
            d += emit_copy(dst + d, i - candidate, match);
            i += match;
            lit = i;
            skip = 32;
            if (i <= limit) table[hash4(load_le(src + i - 1, 4))] = (uint32_t)(i - 1);
            continue;
        }
        i += skip++ >> 5; /* step faster over data that does not compress */
    }
    if (lit < len) d += emit_literal(dst + d, src + lit, len - lit);
    return d;
}

static PyObject *native_s2_encode(PyObject *module, PyObject *arg) {
    (void)module;
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    size_t len = (size_t)view.len;
    if (len > S2_ENCODE_BLOCK_MAX) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "s2_encode: block larger than 64 KiB");
        return NULL;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(32 + len + len / 6));
    if (out == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    size_t n;
    Py_BEGIN_ALLOW_THREADS
    n = s2_encode_block((const uint8_t *)view.buf, len, (uint8_t *)PyBytes_AS_STRING(out));
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    if (_PyBytes_Resize(&out, (Py_ssize_t)n) < 0) return NULL;
    return out;
}


/* --- nats-server's backup archive entries (appliance/store/archive.py is the reference) ---- */

/* 1: a value; 0: the buffer ends first; -1: more than 64 bits. */
static int archive_uvarint(const uint8_t *p, size_t n, size_t *pos, uint64_t *out) {
    uint64_t value = 0;
    for (int shift = 0; *pos < n; shift += 7) {
        if (shift > 63) return -1;
        uint8_t byte = p[(*pos)++];
        value |= (uint64_t)(byte & 0x7F) << shift;
        if (!(byte & 0x80)) {
            *out = value;
            return 1;
        }
    }
    return 0;
}

/* archive_entries(buffer, pos, name_max, entry_max) -> ([(name, ts, seq, hsize, psize, data)], next)
 * Whole entries from pos, stopping after the all-zero end entry or at an incomplete one. */
static PyObject *native_archive_entries(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "archive_entries(buffer, pos, name_max, entry_max)");
        return NULL;
    }
    Py_ssize_t start = PyLong_AsSsize_t(args[1]);
    unsigned long long name_max = PyLong_AsUnsignedLongLong(args[2]);
    unsigned long long entry_max = PyLong_AsUnsignedLongLong(args[3]);
    if (PyErr_Occurred()) return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    const uint8_t *p = (const uint8_t *)view.buf;
    size_t n = (size_t)view.len;
    size_t pos = start < 0 ? n : (size_t)start;
    PyObject *out = PyList_New(0);
    if (out == NULL) goto fail;
    while (pos < n) {
        size_t at = pos;
        uint64_t v[5];
        int rc = 1;
        for (int i = 0; i < 5 && rc == 1; i++) rc = archive_uvarint(p, n, &at, &v[i]);
        if (rc < 0) {
            PyErr_SetString(PyExc_ValueError, "archive: varint overflows 64 bits");
            goto fail;
        }
        if (rc == 0) break;
        uint64_t name_len = v[0], header_size = v[3], payload_size = v[4];
        if (name_len > name_max || header_size > entry_max || payload_size > entry_max ||
            header_size + payload_size > entry_max) {
            PyErr_SetString(PyExc_ValueError, "archive: entry larger than allowed");
            goto fail;
        }
        size_t body = name_len + header_size + payload_size;
        if (body > n - at) break;
        int64_t timestamp = (int64_t)(v[1] >> 1) ^ -(int64_t)(v[1] & 1);
        PyObject *name = PyUnicode_DecodeUTF8((const char *)p + at, (Py_ssize_t)name_len, "strict");
        if (name == NULL) {
            PyErr_Clear();
            PyErr_SetString(PyExc_ValueError, "archive: entry name is not UTF-8");
            goto fail;
        }
        PyObject *item = Py_BuildValue("(NLKKKy#)", name, (long long)timestamp, (unsigned long long)v[2],
                                       (unsigned long long)header_size, (unsigned long long)payload_size,
                                       (const char *)p + at + name_len, (Py_ssize_t)(header_size + payload_size));
        if (item == NULL || PyList_Append(out, item) < 0) {
            Py_XDECREF(item);
            goto fail;
        }
        Py_DECREF(item);
        pos = at + body;
        if (name_len == 0 && v[1] == 0 && v[2] == 0 && body == 0) break; /* the end of the backup */
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("(Nn)", out, (Py_ssize_t)pos);
fail:
    Py_XDECREF(out);
    PyBuffer_Release(&view);
    return NULL;
}

static PyMethodDef s2_methods[] = {
    {"crc32c", (PyCFunction)(void (*)(void))native_crc32c, METH_FASTCALL, "CRC-32C of data, continuing crc."},
    {"s2_decode", native_s2_decode, METH_O, "The decoded bytes of one S2/Snappy block."},
    {"s2_encode", native_s2_encode, METH_O, "One Snappy-compatible block (at most 64 KiB of input)."},
    {"archive_entries", (PyCFunction)(void (*)(void))native_archive_entries, METH_FASTCALL,
     "Whole backup archive entries from pos: (entries, next position)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef s2_module = {
    PyModuleDef_HEAD_INIT, "appliance._s2_native", "S2 framing helpers (see native/s2.c).", -1,
    s2_methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__s2_native(void) {
    crc32c_tables_init();
    PyObject *module = PyModule_Create(&s2_module);
    if (module != NULL && PyModule_AddIntConstant(module, "S2_BLOCK_MAX", S2_BLOCK_MAX) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
