/* A tiny fake of cuDNN's backend API for the unit tests of runtime._cudnn_backend's
 * submit path (GraphLaunch). Descriptors are heap cells; a variant pack keeps the uids,
 * pointers and workspace set on it; cudnnBackendExecute checks that the pack is finalized
 * and remembers what it was given. Counters and the last execution are read through
 * fake_counts / fake_last. cudnnBackendExecute returns $FAKE_EXECUTE_STATUS (0 when unset),
 * after sleeping $FAKE_EXECUTE_DELAY_US microseconds (a long host call: a window for other
 * threads). cudnnSetStream calls and each execution's handle stream (the one last set on it
 * here; 0 if none) are kept in order for fake_stream_log. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    int kind, finalized, n;
    int64_t uids[64];
    void *ptrs[64];
    void *ws;
} desc;

static long creates, destroys, finalizes, executes, live_packs;
static void *last_handle, *last_plan, *last_ptrs[64], *last_ws;
static int64_t last_uids[64];
static int last_n;

size_t cudnnGetVersion(void) { return 91900; }
const char *cudnnGetErrorString(int s) { return s == 5000 ? "CUDNN_STATUS_EXECUTION_FAILED" : "CUDNN_STATUS_UNKNOWN"; }
void cudnnGetLastErrorString(char *buf, size_t n) { snprintf(buf, n, "fake last error"); }
#define STREAM_LOG 256
#define HANDLES 16
static uint64_t stream_log[STREAM_LOG][3];     /* 1 set / 2 execute, handle, stream */
static int n_stream_log;
static void *bound_handle[HANDLES], *bound_stream[HANDLES];

static void log_stream(int what, void *h, void *s) {
    if (n_stream_log >= STREAM_LOG) return;
    stream_log[n_stream_log][0] = (uint64_t)what;
    stream_log[n_stream_log][1] = (uint64_t)(uintptr_t)h;
    stream_log[n_stream_log][2] = (uint64_t)(uintptr_t)s;
    n_stream_log++;
}

static void *stream_of(void *h) {
    for (int i = 0; i < HANDLES; i++) if (bound_handle[i] == h) return bound_stream[i];
    return NULL;
}

int cudnnSetStream(void *h, void *s) {
    int i;
    for (i = 0; i < HANDLES && bound_handle[i] && bound_handle[i] != h; i++) {}
    if (i < HANDLES) { bound_handle[i] = h; bound_stream[i] = s; }
    log_stream(1, h, s);
    return 0;
}

/* entries (kind, handle, stream) since the last call, at most max; their count */
int fake_stream_log(uint64_t *out, int max) {
    int n = n_stream_log < max ? n_stream_log : max;
    memcpy(out, stream_log, (size_t)n * sizeof stream_log[0]);
    n_stream_log = 0;
    return n;
}

int cudnnBackendCreateDescriptor(int kind, void **out) {
    desc *d = calloc(1, sizeof *d);
    d->kind = kind;
    *out = d;
    creates++;
    if (kind == 16) live_packs++;
    return 0;
}

int cudnnBackendDestroyDescriptor(void *p) {
    desc *d = p;
    if (d->kind == 16) live_packs--;
    free(d);
    destroys++;
    return 0;
}

int cudnnBackendSetAttribute(void *p, int attr, int type, int64_t count, const void *values) {
    desc *d = p;
    (void)type;
    if (d->kind != 16) return 0;
    if (attr == 1000) { d->n = (int)count; memcpy(d->uids, values, (size_t)count * sizeof(int64_t)); }
    else if (attr == 1001) memcpy(d->ptrs, values, (size_t)count * sizeof(void *));
    else if (attr == 1003) d->ws = *(void *const *)values;
    return 0;
}

int cudnnBackendGetAttribute(void *p, int a, int t, int64_t r, int64_t *n, void *v) {
    (void)p; (void)a; (void)t; (void)r; (void)v;
    *n = 0;
    return 0;
}

int cudnnBackendFinalize(void *p) {
    ((desc *)p)->finalized = 1;
    finalizes++;
    return 0;
}

int cudnnBackendExecute(void *handle, void *plan, void *vp) {
    const char *s = getenv("FAKE_EXECUTE_STATUS");
    const char *delay = getenv("FAKE_EXECUTE_DELAY_US");
    int st = s ? atoi(s) : 0;
    desc *d = vp;
    if (delay) usleep((useconds_t)atoi(delay));
    if (st) return st;
    if (!d || d->kind != 16 || !d->finalized) return 2000;     /* BAD_PARAM */
    executes++;
    log_stream(2, handle, stream_of(handle));
    last_handle = handle;
    last_plan = plan;
    last_n = d->n;
    memcpy(last_uids, d->uids, sizeof last_uids);
    memcpy(last_ptrs, d->ptrs, sizeof last_ptrs);
    last_ws = d->ws;
    return 0;
}

/* creates, destroys, finalizes, executes, live variant packs */
void fake_counts(long *out) {
    out[0] = creates; out[1] = destroys; out[2] = finalizes; out[3] = executes; out[4] = live_packs;
}

/* handle, plan, workspace, n, then n uids and n pointers */
void fake_last(uint64_t *out) {
    out[0] = (uint64_t)(uintptr_t)last_handle;
    out[1] = (uint64_t)(uintptr_t)last_plan;
    out[2] = (uint64_t)(uintptr_t)last_ws;
    out[3] = (uint64_t)last_n;
    for (int i = 0; i < last_n; i++) {
        out[4 + i] = (uint64_t)last_uids[i];
        out[4 + last_n + i] = (uint64_t)(uintptr_t)last_ptrs[i];
    }
}
