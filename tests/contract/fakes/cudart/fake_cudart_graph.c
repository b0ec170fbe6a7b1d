/* libfakecudart.so: stream capture and CUDA graphs (CUDA 13's cuda_runtime_api.h).
 *
 * Semantics kept from the CUDA runtime API reference (CUDA 13):
 *  - cudaStreamBeginCapture: work enqueued on the stream afterwards (from any thread) is
 *    recorded into a graph, not run; the legacy NULL stream cannot be captured.
 *  - Modes Global / ThreadLocal: the capturing thread may not make "potentially unsafe"
 *    calls (allocation, synchronous copies, synchronizes) until cudaStreamEndCapture,
 *    which must come from the same thread; such a call fails with
 *    cudaErrorStreamCaptureUnsupported and invalidates the capture (EndCapture then
 *    returns cudaErrorStreamCaptureInvalidated). Relaxed mode allows them.
 *  - Synchronizing or querying a capturing stream is refused in every mode.
 *  - cudaGraphExecUpdate succeeds when the new graph has the same nodes (here: the same
 *    count and functions in order); otherwise cudaErrorGraphExecUpdateFailure with
 *    result cudaGraphExecUpdateErrorTopologyChanged.
 *  - cudaGraphExecDestroy with launches in flight: they complete.
 * Not modeled (a violation: hipdnn_async's captures never need them): events recorded or
 * waited on inside a capture, stream-ordered allocation inside a capture, pageable
 * device-to-host copies inside a capture, a graph launched into a capture.
 */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <driver_types.h>

#include <pthread.h>
#include <string.h>

#include "fake_core.h"
#include "fake_cudart_capture.h"

#define MAX_CAPTURES 64

typedef struct { fake_stream *s; pthread_t thread; int mode; } capture_entry;

static pthread_mutex_t cap_mu = PTHREAD_MUTEX_INITIALIZER;
static capture_entry captures[MAX_CAPTURES];
static int n_captures;
static __thread int tl_strict_captures;   /* non-relaxed captures begun on this thread */

static cudaError_t done(fake_rec *r, cudaError_t st) {
    return (cudaError_t)fake_rec_end(r, (int)st);
}

#define BEGIN(name) fake_rec *R = fake_rec_begin("call", name); const char *FN = name; (void)FN
#define INJECT() do { int inj_ = fake_injected(FN); if (inj_) return done(R, (cudaError_t)inj_); } while (0)
#define STREAM_OR_FAIL(var, handle) \
    fake_stream *var = fake_stream_get((void *)(handle), FN); \
    fake_rec_int(R, "stream", fake_stream_id(var)); \
    if (!var) return done(R, cudaErrorInvalidResourceHandle)

static void invalidate_thread_captures(void) {
    pthread_t self = pthread_self();
    pthread_mutex_lock(&cap_mu);
    for (int i = 0; i < n_captures; i++)
        if (captures[i].mode != cudaStreamCaptureModeRelaxed && pthread_equal(captures[i].thread, self))
            fake_stream_invalidate_capture(captures[i].s);
    pthread_mutex_unlock(&cap_mu);
}

int fake_capture_unsafe(const char *fn) {
    if (!tl_strict_captures) return 0;
    fake_violation(fn, "called on a thread that is capturing a stream (not allowed in "
                       "thread-local / global capture mode; the capture is invalidated)");
    invalidate_thread_captures();
    return 1;
}

int fake_capture_on(fake_stream *s, const char *fn, const char *what) {
    if (!s || !fake_stream_capturing(s)) return 0;
    fake_violation(fn, "%s a stream that is capturing (the capture is invalidated)", what);
    fake_stream_invalidate_capture(s);
    return 1;
}

/* ------------------------------------------------------------------ capture */
cudaError_t cudaStreamBeginCapture(cudaStream_t h, enum cudaStreamCaptureMode mode) {
    BEGIN("cudaStreamBeginCapture");
    fake_rec_int(R, "mode", (int)mode);
    if (!h) return done(R, cudaErrorStreamCaptureUnsupported);   /* the legacy stream */
    STREAM_OR_FAIL(s, h);
    INJECT();
    if (mode != cudaStreamCaptureModeGlobal && mode != cudaStreamCaptureModeThreadLocal &&
        mode != cudaStreamCaptureModeRelaxed) return done(R, cudaErrorInvalidValue);
    pthread_mutex_lock(&cap_mu);
    int full = n_captures >= MAX_CAPTURES;
    pthread_mutex_unlock(&cap_mu);
    if (full || fake_stream_begin_capture(s) != 0) return done(R, cudaErrorIllegalState);
    pthread_mutex_lock(&cap_mu);
    captures[n_captures++] = (capture_entry){s, pthread_self(), (int)mode};
    pthread_mutex_unlock(&cap_mu);
    if (mode != cudaStreamCaptureModeRelaxed) tl_strict_captures++;
    return done(R, cudaSuccess);
}

cudaError_t cudaStreamEndCapture(cudaStream_t h, cudaGraph_t *pGraph) {
    BEGIN("cudaStreamEndCapture");
    STREAM_OR_FAIL(s, h);
    INJECT();
    if (!pGraph) return done(R, cudaErrorInvalidValue);
    capture_entry e = {0};
    int found = 0;
    pthread_mutex_lock(&cap_mu);
    for (int i = 0; i < n_captures; i++) {
        if (captures[i].s != s) continue;
        e = captures[i];
        found = 1;
        if (e.mode == cudaStreamCaptureModeRelaxed || pthread_equal(e.thread, pthread_self()))
            captures[i] = captures[--n_captures];
        break;
    }
    pthread_mutex_unlock(&cap_mu);
    if (!found) return done(R, cudaErrorIllegalState);
    if (e.mode != cudaStreamCaptureModeRelaxed) {
        if (!pthread_equal(e.thread, pthread_self())) {
            fake_violation(FN, "ends a capture begun on another thread");
            return done(R, cudaErrorStreamCaptureWrongThread);
        }
        tl_strict_captures--;
    }
    int invalidated = 0;
    fake_graph *g = fake_stream_end_capture(s, &invalidated);
    *pGraph = (cudaGraph_t)(void *)g;
    if (!g) return done(R, invalidated ? cudaErrorStreamCaptureInvalidated : cudaErrorIllegalState);
    fake_rec_int(R, "graph", fake_graph_id(g));
    fake_rec_int(R, "nodes", fake_graph_nodes(g));
    return done(R, cudaSuccess);
}

cudaError_t cudaStreamIsCapturing(cudaStream_t h, enum cudaStreamCaptureStatus *pCaptureStatus) {
    BEGIN("cudaStreamIsCapturing");
    STREAM_OR_FAIL(s, h);
    INJECT();
    if (!pCaptureStatus) return done(R, cudaErrorInvalidValue);
    int st = fake_stream_capturing(s);
    *pCaptureStatus = st == 0 ? cudaStreamCaptureStatusNone : st == 1 ?
        cudaStreamCaptureStatusActive : cudaStreamCaptureStatusInvalidated;
    fake_rec_int(R, "status", (int)*pCaptureStatus);
    return done(R, cudaSuccess);
}

/* ------------------------------------------------------------------ graphs */
static cudaError_t instantiate(fake_rec *R, const char *FN, cudaGraphExec_t *pGraphExec,
                               cudaGraph_t graph, unsigned long long flags) {
    fake_graph *g = fake_graph_get((void *)graph, FAKE_KIND_GRAPH, FN);
    fake_rec_int(R, "graph", fake_graph_id(g));
    fake_rec_uint(R, "flags", flags);
    INJECT();
    if (!g) return done(R, cudaErrorInvalidValue);
    if (!pGraphExec) return done(R, cudaErrorInvalidValue);
    fake_graph *x = fake_graph_instantiate(g);
    *pGraphExec = (cudaGraphExec_t)(void *)x;
    fake_rec_int(R, "exec", fake_graph_id(x));
    return done(R, cudaSuccess);
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                                 unsigned long long flags) {
    BEGIN("cudaGraphInstantiate");
    return instantiate(R, FN, pGraphExec, graph, flags);
}

cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                                          unsigned long long flags) {
    BEGIN("cudaGraphInstantiateWithFlags");
    return instantiate(R, FN, pGraphExec, graph, flags);
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t h) {
    BEGIN("cudaGraphLaunch");
    fake_graph *x = fake_graph_get((void *)graphExec, FAKE_KIND_GRAPH_EXEC, FN);
    fake_rec_int(R, "exec", fake_graph_id(x));
    STREAM_OR_FAIL(s, h);
    INJECT();
    if (!x) return done(R, cudaErrorInvalidResourceHandle);
    if (fake_capture_on(s, FN, "launches a graph into")) return done(R, cudaErrorStreamCaptureUnsupported);
    if (fake_stream_device(s) >= 0 && fake_stream_device(s) != fake_current_device())
        fake_violation(FN, "a stream of device %d used while the calling thread's current "
                       "device is %d", fake_stream_device(s), fake_current_device());
    fake_graph_launch(x, s);
    return done(R, cudaSuccess);
}

cudaError_t cudaGraphExecUpdate(cudaGraphExec_t hGraphExec, cudaGraph_t hGraph,
                                cudaGraphExecUpdateResultInfo *resultInfo) {
    BEGIN("cudaGraphExecUpdate");
    fake_graph *x = fake_graph_get((void *)hGraphExec, FAKE_KIND_GRAPH_EXEC, FN);
    fake_graph *g = fake_graph_get((void *)hGraph, FAKE_KIND_GRAPH, FN);
    fake_rec_int(R, "exec", fake_graph_id(x));
    fake_rec_int(R, "graph", fake_graph_id(g));
    INJECT();
    if (!x || !g || !resultInfo) return done(R, cudaErrorInvalidValue);
    memset(resultInfo, 0, sizeof *resultInfo);
    int same = fake_graph_update(x, g);
    resultInfo->result = same ? cudaGraphExecUpdateSuccess : cudaGraphExecUpdateErrorTopologyChanged;
    fake_rec_int(R, "result", (int)resultInfo->result);
    return done(R, same ? cudaSuccess : cudaErrorGraphExecUpdateFailure);
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
    BEGIN("cudaGraphDestroy");
    fake_graph *g = fake_graph_get((void *)graph, FAKE_KIND_GRAPH, FN);
    fake_rec_int(R, "graph", fake_graph_id(g));
    INJECT();
    if (!g) return done(R, cudaErrorInvalidValue);
    fake_graph_destroy(g);
    return done(R, cudaSuccess);
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t graphExec) {
    BEGIN("cudaGraphExecDestroy");
    fake_graph *x = fake_graph_get((void *)graphExec, FAKE_KIND_GRAPH_EXEC, FN);
    fake_rec_int(R, "exec", fake_graph_id(x));
    INJECT();
    if (!x) return done(R, cudaErrorInvalidValue);
    fake_graph_destroy(x);
    return done(R, cudaSuccess);
}
