/* appliance.bench._loadgen: the bench clients' hot loops (counting inbound MSG/HMSG frames,
 * publishing, synchronous requests, answering requests).
 *
 * scan(buf, start, end, flags, out) walks whole MSG/HMSG frames in buf[start:end], counts them
 * and their payload bytes, and optionally appends one reply per message with a reply subject to
 * the bytearray `out` (an empty ack, or an echo of the payload). It stops, without consuming, at
 * the first frame it does not handle itself: any other operation (PING, +OK, -ERR, INFO, lower
 * case ops, malformed lines), a status message when asked (FLAG_STOP_STATUS), a payload that
 * contains "error" when asked (FLAG_STOP_ERROR), or an incomplete frame. Python then handles that
 * one operation with the full parser and calls scan again.
 *
 * receive_msgs (a plain subscriber) and publish (a publisher) keep whole hot loops in C: Python
 * runs once per budget of milliseconds, for progress, not once per read or write.
 *
 * The pure-Python twin is appliance/bench/_scan_py.py; both must return identical tuples
 * (tests/bench/test_scan.py checks it with Hypothesis). No allocation except growing `out`.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <assert.h>
#include <stdint.h>
#include <string.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>

enum { STOP_NEED_MORE = 0, STOP_OTHER = 1, STOP_STATUS = 2, STOP_ERROR = 3, STOP_TIMEOUT = 4, STOP_CLOSED = 5 };
enum { FLAG_STOP_STATUS = 1, FLAG_STOP_ERROR = 2, FLAG_OUT_ACK = 4, FLAG_OUT_ECHO = 8 };
enum { CONTROL_LINE_BYTES_MAX = 4096, ARGS_MAX = 6, SIZE_DIGITS_MAX = 10 };

typedef struct {
    const char *start;
    Py_ssize_t length;
} span_t;

typedef struct {
    span_t reply;          /* length 0 when the message has no reply subject */
    int64_t header_bytes;  /* 0 for MSG */
    int64_t total_bytes;   /* headers + payload */
    Py_ssize_t body_start; /* absolute offset of the first header or payload byte */
    int is_hmsg;
} frame_t;

static int is_blank(char c) { return c == ' ' || c == '\t'; }

/* Splits line[0:length] on runs of spaces/tabs; returns the number of args, or ARGS_MAX + 1. */
static int split_args(const char *line, Py_ssize_t length, span_t *args) {
    int count = 0;
    Py_ssize_t i = 0;
    while (i < length) {
        while (i < length && is_blank(line[i])) i++;
        if (i >= length) break;
        Py_ssize_t token_start = i;
        while (i < length && !is_blank(line[i])) i++;
        if (count == ARGS_MAX) return ARGS_MAX + 1;
        args[count].start = line + token_start;
        args[count].length = i - token_start;
        count++;
    }
    return count;
}

/* Parses an unsigned decimal of at most SIZE_DIGITS_MAX digits; -1 when it is not one. */
static int64_t parse_size(span_t token) {
    if (token.length == 0 || token.length > SIZE_DIGITS_MAX) return -1;
    int64_t value = 0;
    for (Py_ssize_t i = 0; i < token.length; i++) {
        char c = token.start[i];
        if (c < '0' || c > '9') return -1;
        value = value * 10 + (c - '0');
    }
    return value;
}

static int span_equals(span_t token, const char *literal) {
    size_t n = strlen(literal);
    return (size_t)token.length == n && memcmp(token.start, literal, n) == 0;
}

/* Reads the control line at pos. Returns STOP_NEED_MORE/STOP_OTHER, or -1 with *frame filled. */
static int parse_control_line(const char *buf, Py_ssize_t pos, Py_ssize_t end, frame_t *frame) {
    Py_ssize_t window = end - pos;
    if (window > CONTROL_LINE_BYTES_MAX + 2) window = CONTROL_LINE_BYTES_MAX + 2;
    const char *newline = memchr(buf + pos, '\n', (size_t)window);
    if (newline == NULL) return (end - pos > CONTROL_LINE_BYTES_MAX + 1) ? STOP_OTHER : STOP_NEED_MORE;
    Py_ssize_t line_length = newline - (buf + pos);
    if (line_length > 0 && buf[pos + line_length - 1] == '\r') line_length--;
    span_t args[ARGS_MAX];
    int count = split_args(buf + pos, line_length, args);
    if (count < 1 || count > ARGS_MAX) return STOP_OTHER;
    int is_hmsg = span_equals(args[0], "HMSG");
    if (!is_hmsg && !span_equals(args[0], "MSG")) return STOP_OTHER;
    int sizes = is_hmsg ? 2 : 1;
    int with_reply = count - 3 - sizes; /* op subject sid [reply] sizes... */
    if (with_reply != 0 && with_reply != 1) return STOP_OTHER;
    frame->reply.start = with_reply ? args[3].start : NULL;
    frame->reply.length = with_reply ? args[3].length : 0;
    frame->total_bytes = parse_size(args[count - 1]);
    frame->header_bytes = is_hmsg ? parse_size(args[count - 2]) : 0;
    if (frame->total_bytes < 0 || frame->header_bytes < 0) return STOP_OTHER;
    if (frame->header_bytes > frame->total_bytes) return STOP_OTHER;
    frame->is_hmsg = is_hmsg;
    frame->body_start = (newline - buf) + 1;
    return -1;
}

static int is_status(const char *body, int64_t header_bytes) {
    return header_bytes >= 10 && memcmp(body, "NATS/1.0 ", 9) == 0 && body[9] >= '0' && body[9] <= '9';
}

static int contains_error(const char *data, int64_t length) {
    static const char needle[] = "\"error\"";
    const int64_t n = (int64_t)sizeof(needle) - 1;
    for (int64_t i = 0; i + n <= length; i++) {
        const char *quote = memchr(data + i, '"', (size_t)(length - n - i + 1));
        if (quote == NULL) return 0;
        i = quote - data;
        if (memcmp(quote, needle, (size_t)n) == 0) return 1;
    }
    return 0;
}

static int append(PyObject *out, const char *data, Py_ssize_t length) {
    Py_ssize_t old_size = PyByteArray_GET_SIZE(out);
    if (PyByteArray_Resize(out, old_size + length) < 0) return -1;
    memcpy(PyByteArray_AS_STRING(out) + old_size, data, (size_t)length);
    return 0;
}

static int append_reply(PyObject *out, span_t reply, const char *payload, int64_t payload_bytes) {
    char size_text[32];
    int size_length = snprintf(size_text, sizeof size_text, " %lld\r\n", (long long)payload_bytes);
    assert(size_length > 0 && size_length < (int)sizeof size_text);
    if (append(out, "PUB ", 4) < 0) return -1;
    if (append(out, reply.start, reply.length) < 0) return -1;
    if (append(out, size_text, size_length) < 0) return -1;
    if (append(out, payload, (Py_ssize_t)payload_bytes) < 0) return -1;
    return append(out, "\r\n", 2);
}

typedef struct {
    long long msgs;
    long long payload_bytes;
    Py_ssize_t last_reply_start;
    Py_ssize_t last_reply_end;
} scan_counts_t;

/* Walks frames from *pos; stops after max_msgs messages (-1: no limit). Returns the stop reason,
 * or -1 with a Python error set when growing `out` failed. */
static int scan_frames(const char *buf, Py_ssize_t *pos, Py_ssize_t end, int flags, PyObject *out,
                       long long max_msgs, scan_counts_t *counts) {
    for (;;) {
        if (*pos >= end || counts->msgs == max_msgs) return STOP_NEED_MORE;
        frame_t frame;
        int line = parse_control_line(buf, *pos, end, &frame);
        if (line >= 0) return line;
        Py_ssize_t frame_end = frame.body_start + (Py_ssize_t)frame.total_bytes + 2;
        if (frame_end > end) return STOP_NEED_MORE;
        if (buf[frame_end - 2] != '\r' || buf[frame_end - 1] != '\n') return STOP_OTHER;
        const char *body = buf + frame.body_start;
        const char *payload = body + frame.header_bytes;
        int64_t data_bytes = frame.total_bytes - frame.header_bytes;
        if ((flags & FLAG_STOP_STATUS) && frame.is_hmsg && is_status(body, frame.header_bytes)) return STOP_STATUS;
        if ((flags & FLAG_STOP_ERROR) && contains_error(payload, data_bytes)) return STOP_ERROR;
        if (frame.reply.length > 0) {
            counts->last_reply_start = frame.reply.start - buf;
            counts->last_reply_end = counts->last_reply_start + frame.reply.length;
            int failed = 0;
            if (flags & FLAG_OUT_ACK) failed = append_reply(out, frame.reply, payload, 0);
            else if (flags & FLAG_OUT_ECHO) failed = append_reply(out, frame.reply, payload, data_bytes);
            if (failed) return -1;
        }
        counts->msgs++;
        counts->payload_bytes += frame.total_bytes;
        *pos = frame_end;
    }
}

static PyObject *scan(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer view;
    Py_ssize_t start, end;
    int flags;
    PyObject *out;
    if (!PyArg_ParseTuple(args, "y*nniO", &view, &start, &end, &flags, &out)) return NULL;
    if (start < 0 || end < start || end > view.len) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "scan: need 0 <= start <= end <= len(buf)");
        return NULL;
    }
    if ((flags & (FLAG_OUT_ACK | FLAG_OUT_ECHO)) && !PyByteArray_Check(out)) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_TypeError, "scan: out must be a bytearray when replies are requested");
        return NULL;
    }
    scan_counts_t counts = {0, 0, -1, -1};
    Py_ssize_t pos = start;
    int stop = scan_frames(view.buf, &pos, end, flags, out, -1, &counts);
    PyBuffer_Release(&view);
    if (stop < 0) return NULL;
    return Py_BuildValue("(nLLinn)", pos, counts.msgs, counts.payload_bytes, stop, counts.last_reply_start,
                         counts.last_reply_end);
}

/* ---- synchronous request loop ----------------------------------------------------------------
 * sync_requests(fd, frame, count, rx, start, end, latencies, awaiting, sent_ns, timeout_ms)
 * sends `frame` and waits for its one reply, `count` times, writing each latency (ns) into the
 * int64 buffer `latencies`. rx is the connection's receive bytearray with unread bytes in
 * rx[start:end]. It returns early, with the state needed to resume, when anything but a plain
 * reply arrives (PING, -ERR, a status or error reply: Python handles that one operation), on
 * timeout or when the server closed: (done, start, end, stop, awaiting, sent_ns). */

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int wait_fd(int fd, short events, int timeout_ms) {
    struct pollfd pfd = {fd, events, 0};
    for (;;) {
        int ready = poll(&pfd, 1, timeout_ms);
        if (ready >= 0 || errno != EINTR) return ready;
    }
}

/* 0 sent, STOP_TIMEOUT, or -1 with errno set. */
static int send_all(int fd, const char *data, Py_ssize_t length, int timeout_ms) {
    while (length > 0) {
        ssize_t written = send(fd, data, (size_t)length, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (written > 0) {
            data += written;
            length -= written;
        } else if (written < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            int ready = wait_fd(fd, POLLOUT, timeout_ms);
            if (ready == 0) return STOP_TIMEOUT;
            if (ready < 0) return -1;
        } else if (!(written < 0 && errno == EINTR)) {
            return -1;
        }
    }
    return 0;
}

/* Reads once into rx after start/end (compacting first); 0 read, STOP_TIMEOUT, STOP_CLOSED, -1. */
static int receive_some(int fd, char *rx, Py_ssize_t capacity, Py_ssize_t *start, Py_ssize_t *end, int timeout_ms) {
    if (*start == *end) {
        *start = *end = 0;
    } else if (capacity - *end < capacity / 2) {
        memmove(rx, rx + *start, (size_t)(*end - *start));
        *end -= *start;
        *start = 0;
    }
    for (;;) {
        ssize_t got = recv(fd, rx + *end, (size_t)(capacity - *end), MSG_DONTWAIT);
        if (got > 0) {
            *end += got;
            return 0;
        }
        if (got == 0) return STOP_CLOSED;
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) return -1;
        int ready = wait_fd(fd, POLLIN, timeout_ms);
        if (ready == 0) return STOP_TIMEOUT;
        if (ready < 0) return -1;
    }
}

/* The plain publish and subscribe loops block in send/recv (one system call per wakeup, as a C
 * client would) instead of poll + non-blocking calls. Python keeps its sockets non-blocking, so
 * these switch the descriptor to blocking with SO_RCVTIMEO/SO_SNDTIMEO = timeout_ms for the call
 * and put everything back before returning. 0, or -1 with errno set. */
enum { STOP_SIGNALLED = -2 }; /* internal: a signal handler raised; the Python error is set */

typedef struct {
    int fd;
    int flags;
    int option; /* SO_RCVTIMEO or SO_SNDTIMEO */
    struct timeval saved;
} blocking_t;

static int enter_blocking(blocking_t *state, int fd, int option, int timeout_ms) {
    state->fd = fd;
    state->option = option;
    socklen_t length = sizeof state->saved;
    state->flags = fcntl(fd, F_GETFL);
    if (state->flags < 0 || getsockopt(fd, SOL_SOCKET, option, &state->saved, &length) < 0) return -1;
    struct timeval timeout = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    if (setsockopt(fd, SOL_SOCKET, option, &timeout, sizeof timeout) < 0) return -1;
    if (fcntl(fd, F_SETFL, state->flags & ~O_NONBLOCK) < 0) return -1;
    return 0;
}

static void leave_blocking(const blocking_t *state) {
    int saved_errno = errno;
    (void)fcntl(state->fd, F_SETFL, state->flags);
    (void)setsockopt(state->fd, SOL_SOCKET, state->option, &state->saved, sizeof state->saved);
    errno = saved_errno;
}

/* One blocking read into rx after start/end (compacting first): 0, STOP_TIMEOUT, STOP_CLOSED or -1. */
static int receive_blocking(int fd, char *rx, Py_ssize_t capacity, Py_ssize_t *start, Py_ssize_t *end) {
    if (*start == *end) {
        *start = *end = 0;
    } else if (capacity - *end < capacity / 2) {
        memmove(rx, rx + *start, (size_t)(*end - *start));
        *end -= *start;
        *start = 0;
    }
    for (;;) {
        ssize_t got;
        int error;
        Py_BEGIN_ALLOW_THREADS /* the read may block: other threads (and signal senders) run */
        got = recv(fd, rx + *end, (size_t)(capacity - *end), 0);
        error = errno;
        Py_END_ALLOW_THREADS
        if (got > 0) *end += got;
        if (PyErr_CheckSignals() < 0) return STOP_SIGNALLED; /* Ctrl-C: Python raises it */
        errno = error;
        if (got > 0) return 0;
        if (got == 0) return STOP_CLOSED;
        if (errno == EINTR) continue;
        return (errno == EAGAIN || errno == EWOULDBLOCK) ? STOP_TIMEOUT : -1;
    }
}

static PyObject *sync_requests(PyObject *self, PyObject *args) {
    (void)self;
    int fd, awaiting, timeout_ms;
    Py_buffer frame, rx, latencies;
    Py_ssize_t count, start, end;
    long long sent_ns;
    if (!PyArg_ParseTuple(args, "iy*nw*nnw*iLi", &fd, &frame, &count, &rx, &start, &end, &latencies,
                          &awaiting, &sent_ns, &timeout_ms))
        return NULL;
    PyObject *result = NULL;
    if (start < 0 || end < start || end > rx.len || rx.len < 2 * (CONTROL_LINE_BYTES_MAX + 2) ||
        latencies.len < (Py_ssize_t)(count * (Py_ssize_t)sizeof(int64_t))) {
        PyErr_SetString(PyExc_ValueError, "sync_requests: bad buffer bounds");
        goto done;
    }
    int64_t *latency = latencies.buf;
    char *buf = rx.buf;
    Py_ssize_t completed = 0;
    int stop = STOP_NEED_MORE;
    while (completed < count) {
        if (!awaiting) {
            sent_ns = now_ns();
            int sent = send_all(fd, frame.buf, frame.len, timeout_ms);
            if (sent != 0) { stop = sent; break; }
            awaiting = 1;
        }
        scan_counts_t counts = {0, 0, -1, -1};
        stop = scan_frames(buf, &start, end, FLAG_STOP_STATUS | FLAG_STOP_ERROR, NULL, 1, &counts);
        if (counts.msgs == 1) {
            latency[completed++] = now_ns() - sent_ns;
            awaiting = 0;
            continue;
        }
        if (stop != STOP_NEED_MORE) break;
        stop = receive_some(fd, buf, rx.len, &start, &end, timeout_ms);
        if (stop != 0) break;
    }
    if (stop < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        goto done;
    }
    if (completed == count) stop = STOP_NEED_MORE;
    result = Py_BuildValue("(nnniiL)", completed, start, end, stop, awaiting, sent_ns);
done:
    PyBuffer_Release(&frame);
    PyBuffer_Release(&rx);
    PyBuffer_Release(&latencies);
    return result;
}

/* serve_replies(fd, rx, start, end, out, flags, max_msgs, timeout_ms)
 * reads requests into rx and answers each one with a reply subject (flags: FLAG_OUT_ECHO or
 * FLAG_OUT_ACK) until max_msgs were seen (-1: no limit), nothing arrived for timeout_ms
 * (STOP_TIMEOUT: the caller looks at its stop signal and calls again), or anything but a plain
 * message is next (Python handles it). Returns (msgs, start, end, stop). */
static PyObject *serve_replies(PyObject *self, PyObject *args) {
    (void)self;
    int fd, flags, timeout_ms;
    Py_buffer rx;
    Py_ssize_t start, end;
    PyObject *out;
    long long max_msgs;
    if (!PyArg_ParseTuple(args, "iw*nnOiLi", &fd, &rx, &start, &end, &out, &flags, &max_msgs, &timeout_ms))
        return NULL;
    PyObject *result = NULL;
    if (start < 0 || end < start || end > rx.len || rx.len < 2 * (CONTROL_LINE_BYTES_MAX + 2) ||
        !PyByteArray_Check(out)) {
        PyErr_SetString(PyExc_ValueError, "serve_replies: bad buffer bounds or out is not a bytearray");
        goto done;
    }
    scan_counts_t counts = {0, 0, -1, -1};
    int stop = STOP_NEED_MORE;
    for (;;) {
        stop = scan_frames(rx.buf, &start, end, flags, out, max_msgs, &counts);
        if (stop < 0) goto done;
        Py_ssize_t pending = PyByteArray_GET_SIZE(out);
        if (pending > 0) {
            int sent = send_all(fd, PyByteArray_AS_STRING(out), pending, timeout_ms);
            if (PyByteArray_Resize(out, 0) < 0) goto done;
            if (sent != 0) { stop = sent; break; }
        }
        if (stop != STOP_NEED_MORE || counts.msgs == max_msgs) break;
        stop = receive_some(fd, rx.buf, rx.len, &start, &end, timeout_ms);
        if (stop != 0) break;
    }
    if (stop < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        goto done;
    }
    result = Py_BuildValue("(Lnni)", counts.msgs, start, end, stop);
done:
    PyBuffer_Release(&rx);
    return result;
}

/* ---- plain subscriber loop ---------------------------------------------------------------------
 * receive_msgs(fd, rx, start, end, max_msgs, timeout_ms, budget_ms)
 * counts plain MSG/HMSG frames read into rx (unread bytes in rx[start:end]) until max_msgs were
 * counted, budget_ms passed (the caller draws progress and calls again), nothing arrived for
 * timeout_ms (STOP_TIMEOUT), the server closed (STOP_CLOSED), or anything but a message is next
 * (STOP_OTHER: Python handles that one operation). Messages beyond max_msgs stay unread in rx.
 * Returns (msgs, payload_bytes, start, end, stop, first_ns, last_ns): the CLOCK_MONOTONIC times
 * of the reads that brought the first and the last counted message of this call (0 if none). */
static PyObject *receive_msgs(PyObject *self, PyObject *args) {
    (void)self;
    int fd, timeout_ms, budget_ms;
    Py_buffer rx;
    Py_ssize_t start, end;
    long long max_msgs;
    if (!PyArg_ParseTuple(args, "iw*nnLii", &fd, &rx, &start, &end, &max_msgs, &timeout_ms, &budget_ms))
        return NULL;
    PyObject *result = NULL;
    if (start < 0 || end < start || end > rx.len || rx.len < 2 * (CONTROL_LINE_BYTES_MAX + 2) || max_msgs < 0) {
        PyErr_SetString(PyExc_ValueError, "receive_msgs: bad buffer bounds or max_msgs");
        goto done;
    }
    scan_counts_t counts = {0, 0, -1, -1};
    int stop = STOP_NEED_MORE;
    int64_t first_ns = 0, last_ns = 0;
    int64_t read_ns = now_ns(); /* bytes already buffered count as read now */
    const int64_t deadline_ns = read_ns + (int64_t)budget_ms * 1000000;
    blocking_t blocking;
    if (enter_blocking(&blocking, fd, SO_RCVTIMEO, timeout_ms) < 0) {
        leave_blocking(&blocking);
        PyErr_SetFromErrno(PyExc_OSError);
        goto done;
    }
    for (;;) {
        long long before = counts.msgs;
        stop = scan_frames(rx.buf, &start, end, 0, NULL, max_msgs, &counts);
        if (counts.msgs > before) {
            if (first_ns == 0) first_ns = read_ns;
            last_ns = read_ns;
        }
        if (stop != STOP_NEED_MORE || counts.msgs == max_msgs) break;
        if (read_ns >= deadline_ns) break;
        stop = receive_blocking(fd, rx.buf, rx.len, &start, &end);
        if (stop != 0) break;
        read_ns = now_ns();
    }
    leave_blocking(&blocking);
    if (stop == STOP_SIGNALLED) goto done;
    if (stop < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        goto done;
    }
    result = Py_BuildValue("(LLnniLL)", counts.msgs, counts.payload_bytes, start, end, stop, (long long)first_ns,
                           (long long)last_ns);
done:
    PyBuffer_Release(&rx);
    return result;
}

/* ---- publisher loop ----------------------------------------------------------------------------
 * publish(fd, batch, frame_bytes, count, timeout_ms, budget_ms)
 * writes `count` frames taken from `batch` (identical frames of frame_bytes each, back to back),
 * as many per write as the batch holds. It returns (sent, stop) after count frames, after
 * budget_ms (progress), or with STOP_OTHER as soon as the server sent us something (a PING, an
 * -ERR: Python reads it) -- always on a frame boundary, so the caller can simply call again.
 * STOP_TIMEOUT (nothing could be written for timeout_ms) and STOP_CLOSED may leave a frame
 * broken off after `sent` whole ones: the connection is finished then. The socket is looked at
 * for input every PUBLISH_INPUT_CHECK_BATCHES writes (the final flush reads the rest).
 */
enum { PUBLISH_INPUT_CHECK_BATCHES = 16 };

/* Blocking writes of data[0:length]: 0 when all was written, else STOP_TIMEOUT (SO_SNDTIMEO passed
 * without progress), STOP_CLOSED or -1 (errno); *done counts the bytes written either way. */
static int write_frames(int fd, const char *data, Py_ssize_t length, Py_ssize_t *done) {
    *done = 0;
    while (*done < length) {
        ssize_t written;
        int error;
        Py_BEGIN_ALLOW_THREADS /* the write may block */
        written = send(fd, data + *done, (size_t)(length - *done), MSG_NOSIGNAL);
        error = errno;
        Py_END_ALLOW_THREADS
        if (written > 0) *done += written;
        if (PyErr_CheckSignals() < 0) return STOP_SIGNALLED; /* a partial write hides EINTR */
        errno = error;
        if (written > 0 || (written < 0 && errno == EINTR)) continue;
        if (written < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return STOP_TIMEOUT;
        if (written < 0 && (errno == EPIPE || errno == ECONNRESET)) return STOP_CLOSED;
        return -1;
    }
    return 0;
}

static PyObject *publish(PyObject *self, PyObject *args) {
    (void)self;
    int fd, timeout_ms, budget_ms;
    Py_buffer batch;
    Py_ssize_t frame_bytes;
    long long count;
    if (!PyArg_ParseTuple(args, "iy*nLii", &fd, &batch, &frame_bytes, &count, &timeout_ms, &budget_ms)) return NULL;
    PyObject *result = NULL;
    if (frame_bytes <= 0 || batch.len < frame_bytes || batch.len % frame_bytes != 0 || count < 0) {
        PyErr_SetString(PyExc_ValueError, "publish: batch must hold whole frames and count must be >= 0");
        goto done;
    }
    const long long per_batch = batch.len / frame_bytes;
    const int64_t deadline_ns = now_ns() + (int64_t)budget_ms * 1000000;
    long long sent = 0, batches = 0;
    int stop = STOP_NEED_MORE;
    blocking_t blocking;
    if (enter_blocking(&blocking, fd, SO_SNDTIMEO, timeout_ms) < 0) {
        leave_blocking(&blocking);
        PyErr_SetFromErrno(PyExc_OSError);
        goto done;
    }
    while (sent < count) {
        long long frames = count - sent < per_batch ? count - sent : per_batch;
        Py_ssize_t done_bytes = 0;
        int written = write_frames(fd, batch.buf, (Py_ssize_t)(frames * frame_bytes), &done_bytes);
        sent += done_bytes / frame_bytes; /* whole frames only; a broken-off frame is not sent */
        if (written != 0) {
            stop = written;
            break;
        }
        if (++batches % PUBLISH_INPUT_CHECK_BATCHES == 0) {
            struct pollfd pfd = {fd, POLLIN, 0};
            if (poll(&pfd, 1, 0) > 0) {
                stop = STOP_OTHER;
                break;
            }
            if (now_ns() >= deadline_ns) break;
        }
    }
    leave_blocking(&blocking);
    if (stop == STOP_SIGNALLED) goto done;
    if (stop < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        goto done;
    }
    result = Py_BuildValue("(Li)", sent, stop);
done:
    PyBuffer_Release(&batch);
    return result;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS,
     "scan(buf, start, end, flags, out) -> (pos, msgs, payload_bytes, stop, last_reply_start, last_reply_end)"},
    {"sync_requests", sync_requests, METH_VARARGS,
     "sync_requests(fd, frame, count, rx, start, end, latencies, awaiting, sent_ns, timeout_ms)"
     " -> (done, start, end, stop, awaiting, sent_ns)"},
    {"serve_replies", serve_replies, METH_VARARGS,
     "serve_replies(fd, rx, start, end, out, flags, max_msgs, timeout_ms) -> (msgs, start, end, stop)"},
    {"receive_msgs", receive_msgs, METH_VARARGS,
     "receive_msgs(fd, rx, start, end, max_msgs, timeout_ms, budget_ms)"
     " -> (msgs, payload_bytes, start, end, stop, first_ns, last_ns)"},
    {"publish", publish, METH_VARARGS,
     "publish(fd, batch, frame_bytes, count, timeout_ms, budget_ms) -> (sent, stop)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_loadgen", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__loadgen(void) { return PyModule_Create(&module); }
