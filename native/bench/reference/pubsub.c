/* A minimal C reference client for the pub+sub scenario: is `appliance bench` the bottleneck?
 *
 *   cc -O2 -o pubsub native/bench/reference/pubsub.c
 *   ./pubsub HOST PORT MSGS SIZE [WRITE_BYTES]
 *
 * One publisher and one subscriber process (fork), as `appliance bench pubsub` runs them: the
 * subscriber subscribes to `bench` and flushes, both wait for a common start, the publisher
 * writes MSGS frames `PUB bench SIZE` in writes of about WRITE_BYTES (default 65536) and flushes
 * with PING/PONG; the subscriber counts MSG frames with plain blocking reads into a 4 MiB buffer
 * and answers PINGs. Timing follows nats bench: the publisher from the start to its PONG, the
 * subscriber from its first message to its last; the total is every message (published plus
 * received) over the earliest start to the latest end. Prints one JSON line; exits non-zero with
 * a reason on stderr when anything goes wrong (a missing message is a timeout after 10 s).
 *
 * Built and run by appliance/bench/reference.py; not part of the Python extension (setup.py only
 * compiles the .c files directly in native/bench).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { READ_BUFFER_BYTES = 4 << 20, ROOM_MIN_BYTES = (1 << 20) + 4096, IDLE_TIMEOUT_S = 10, LINE_MAX_BYTES = 4096 };

typedef struct {
    volatile int ready;   /* clients connected and set up */
    volatile int go;      /* the common start */
    volatile int64_t pub_start_ns, pub_end_ns, sub_first_ns, sub_last_ns;
    volatile long long sub_msgs;
} shared_t;

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void fail(const char *who, const char *what) {
    fprintf(stderr, "%s: %s%s%s\n", who, what, errno ? ": " : "", errno ? strerror(errno) : "");
    exit(1);
}

static void write_all(int fd, const char *data, size_t length, const char *who) {
    while (length > 0) {
        ssize_t n = write(fd, data, length);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) fail(who, "write");
        data += n;
        length -= (size_t)n;
    }
}

/* Reads until `needle` was seen in what arrived (handshake and flushes only). */
static void read_until(int fd, const char *needle, const char *who) {
    char line[LINE_MAX_BYTES + 1];
    size_t got = 0;
    for (;;) {
        if (got == LINE_MAX_BYTES) { /* keep the tail: the needle may straddle */
            memmove(line, line + LINE_MAX_BYTES / 2, LINE_MAX_BYTES / 2);
            got = LINE_MAX_BYTES / 2;
        }
        ssize_t n = read(fd, line + got, LINE_MAX_BYTES - got);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) fail(who, "connection closed or timed out during setup");
        got += (size_t)n;
        line[got] = '\0';
        if (strstr(line, "-ERR")) fail(who, line);
        if (strstr(line, needle)) return;
    }
}

static int dial(const char *host, const char *port, const char *who) {
    struct addrinfo hints = {0}, *found;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(host, port, &hints, &found) != 0) fail(who, "cannot resolve the server address");
    int fd = socket(found->ai_family, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, found->ai_addr, found->ai_addrlen) < 0) fail(who, "connect");
    freeaddrinfo(found);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct timeval idle = {IDLE_TIMEOUT_S, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &idle, sizeof idle);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &idle, sizeof idle);
    read_until(fd, "\r\n", who); /* INFO */
    static const char connect_line[] =
        "CONNECT {\"verbose\":false,\"pedantic\":false,\"lang\":\"c-reference\",\"protocol\":1}\r\nPING\r\n";
    write_all(fd, connect_line, sizeof connect_line - 1, who);
    read_until(fd, "PONG\r\n", who);
    return fd;
}

static void wait_for_go(shared_t *shared) {
    __atomic_add_fetch(&shared->ready, 1, __ATOMIC_SEQ_CST);
    while (!__atomic_load_n(&shared->go, __ATOMIC_SEQ_CST)) usleep(50);
}

/* The size at the end of a MSG control line, or -1. */
static long frame_size(const char *line, const char *newline) {
    const char *end = newline;
    if (end > line && end[-1] == '\r') end--;
    const char *digits = end;
    while (digits > line && digits[-1] >= '0' && digits[-1] <= '9') digits--;
    if (digits == end || digits == line || digits[-1] != ' ') return -1;
    long size = 0;
    for (const char *p = digits; p < end; p++) size = size * 10 + (*p - '0');
    return size;
}

static void subscriber(const char *host, const char *port, long long msgs, shared_t *shared) {
    const char *who = "subscriber";
    int fd = dial(host, port, who);
    static const char sub_line[] = "SUB bench 1\r\nPING\r\n";
    write_all(fd, sub_line, sizeof sub_line - 1, who);
    read_until(fd, "PONG\r\n", who);
    char *buf = malloc(READ_BUFFER_BYTES);
    if (buf == NULL) fail(who, "out of memory");
    wait_for_go(shared);
    size_t start = 0, end = 0;
    long long count = 0;
    while (count < msgs) {
        if (start == end) {
            start = end = 0;
        } else if (READ_BUFFER_BYTES - end < ROOM_MIN_BYTES) {
            memmove(buf, buf + start, end - start);
            end -= start;
            start = 0;
        }
        ssize_t n = read(fd, buf + end, READ_BUFFER_BYTES - end);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            fprintf(stderr, "subscriber: %lld of %lld messages, then %s\n", count, msgs,
                    n == 0 ? "the server closed the connection" : "nothing for 10 s");
            exit(1);
        }
        int64_t read_ns = now_ns();
        end += (size_t)n;
        long long before = count;
        while (count < msgs) {
            char *newline = memchr(buf + start, '\n', end - start);
            if (newline == NULL) break;
            size_t after_line = (size_t)(newline - buf) + 1;
            if (end - start >= 4 && memcmp(buf + start, "MSG ", 4) == 0) {
                long size = frame_size(buf + start, newline);
                if (size < 0) fail(who, "bad MSG line");
                if (after_line + (size_t)size + 2 > end) break;
                start = after_line + (size_t)size + 2;
                count++;
            } else if (end - start >= 4 && memcmp(buf + start, "PING", 4) == 0) {
                write_all(fd, "PONG\r\n", 6, who);
                start = after_line;
            } else if (end - start >= 4 && memcmp(buf + start, "-ERR", 4) == 0) {
                *newline = '\0';
                fail(who, buf + start);
            } else {
                start = after_line; /* +OK, PONG, INFO */
            }
        }
        if (count > before) {
            if (before == 0) shared->sub_first_ns = read_ns;
            shared->sub_last_ns = read_ns;
        }
    }
    shared->sub_msgs = count;
    exit(0);
}

static void publisher(const char *host, const char *port, long long msgs, int size, int write_bytes,
                      shared_t *shared) {
    const char *who = "publisher";
    int fd = dial(host, port, who);
    char head[64];
    int head_bytes = snprintf(head, sizeof head, "PUB bench %d\r\n", size);
    size_t frame_bytes = (size_t)head_bytes + (size_t)size + 2;
    long long per_write = write_bytes / (long long)frame_bytes;
    if (per_write < 1) per_write = 1;
    char *batch = malloc((size_t)per_write * frame_bytes);
    if (batch == NULL) fail(who, "out of memory");
    for (long long i = 0; i < per_write; i++) {
        char *frame = batch + i * frame_bytes;
        memcpy(frame, head, (size_t)head_bytes);
        for (int j = 0; j < size; j++) frame[head_bytes + j] = (char)('a' + j % 26);
        memcpy(frame + head_bytes + size, "\r\n", 2);
    }
    wait_for_go(shared);
    shared->pub_start_ns = now_ns();
    for (long long sent = 0; sent < msgs;) {
        long long frames = msgs - sent < per_write ? msgs - sent : per_write;
        write_all(fd, batch, (size_t)frames * frame_bytes, who);
        sent += frames;
    }
    write_all(fd, "PING\r\n", 6, who);
    read_until(fd, "PONG\r\n", who);
    shared->pub_end_ns = now_ns();
    exit(0);
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: %s HOST PORT MSGS SIZE [WRITE_BYTES]\n", argv[0]);
        return 2;
    }
    const char *host = argv[1], *port = argv[2];
    long long msgs = atoll(argv[3]);
    int size = atoi(argv[4]);
    int write_bytes = argc > 5 ? atoi(argv[5]) : 65536;
    if (msgs <= 0 || size < 0 || write_bytes <= 0) {
        fprintf(stderr, "MSGS must be > 0, SIZE >= 0, WRITE_BYTES > 0\n");
        return 2;
    }
    shared_t *shared = mmap(NULL, sizeof *shared, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (shared == MAP_FAILED) fail("reference", "mmap");
    memset((void *)shared, 0, sizeof *shared);
    pid_t sub = fork();
    if (sub == 0) subscriber(host, port, msgs, shared);
    pid_t pub = fork();
    if (pub == 0) publisher(host, port, msgs, size, write_bytes, shared);
    int sub_status = 0, pub_status = 0;
    int64_t setup_deadline = now_ns() + (int64_t)IDLE_TIMEOUT_S * 1000000000;
    while (__atomic_load_n(&shared->ready, __ATOMIC_SEQ_CST) < 2) {
        int sub_done = waitpid(sub, &sub_status, WNOHANG) == sub, pub_done = waitpid(pub, &pub_status, WNOHANG) == pub;
        if (sub_done || pub_done || now_ns() > setup_deadline) { /* a client could not set up */
            if (!sub_done) kill(sub, SIGKILL), waitpid(sub, &sub_status, 0);
            if (!pub_done) kill(pub, SIGKILL), waitpid(pub, &pub_status, 0);
            fprintf(stderr, "reference: the clients could not connect and set up\n");
            return 1;
        }
        usleep(100);
    }
    __atomic_store_n(&shared->go, 1, __ATOMIC_SEQ_CST);
    waitpid(sub, &sub_status, 0);
    waitpid(pub, &pub_status, 0);
    if (!WIFEXITED(sub_status) || WEXITSTATUS(sub_status) != 0 || !WIFEXITED(pub_status) ||
        WEXITSTATUS(pub_status) != 0) {
        fprintf(stderr, "reference: a client failed\n");
        return 1;
    }
    double pub_s = (shared->pub_end_ns - shared->pub_start_ns) / 1e9;
    double sub_s = (shared->sub_last_ns - shared->sub_first_ns) / 1e9;
    if (sub_s <= 0) /* every message came in one read (a loaded host): time it from the first publish */
        sub_s = (shared->sub_last_ns - shared->pub_start_ns) / 1e9;
    int64_t first = shared->pub_start_ns < shared->sub_first_ns ? shared->pub_start_ns : shared->sub_first_ns;
    int64_t last = shared->pub_end_ns > shared->sub_last_ns ? shared->pub_end_ns : shared->sub_last_ns;
    double total_s = (last - first) / 1e9;
    printf("{\"msgs\": %lld, \"size\": %d, \"pub_msgs_per_s\": %.1f, \"sub_msgs_per_s\": %.1f, "
           "\"total_msgs_per_s\": %.1f}\n",
           msgs, size, pub_s > 0 ? msgs / pub_s : 0.0, sub_s > 0 ? shared->sub_msgs / sub_s : 0.0,
           total_s > 0 ? (msgs + shared->sub_msgs) / total_s : 0.0);
    return 0;
}
