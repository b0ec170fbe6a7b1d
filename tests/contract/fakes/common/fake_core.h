/* The vendor-neutral core of the fake GPU libraries of tests/contract.
 *
 * One copy lives in each fake *runtime* library (libfakecudart.so; the HIP fake links the
 * same file): a call log, failure injection, a table of "device" allocations (host memory
 * handed out as device memory), and streams that run work in order on a worker thread with
 * a small delay, events, and a registry of handles. The fake DNN libraries
 * (libfakecudnn.so, the MIOpen fake) link against their runtime fake and use this API to
 * log their calls and to enqueue their kernels on the runtime's streams, so that one log
 * holds the whole call sequence in order.
 *
 * Every exported name starts with fake_; tests reach the log through ctypes
 * (tests/contract/_fakes.py): fake_log_json(), fake_log_clear(), fake_inject(),
 * fake_set_delay_us(), fake_violations().
 *
 * C and C++ (the MIOpen fake is C++): plain C API inside extern "C".
 */
#ifndef HIPDNN_ASYNC_FAKE_CORE_H
#define HIPDNN_ASYNC_FAKE_CORE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FAKE_API __attribute__((visibility("default")))

/* ------------------------------------------------------------------ call records
 * A record is one JSON object: {"rec": kind, "fn": name, "thread": t, ...fields...,
 * "status": s, "seq": n}. Build it with fake_rec_begin, add fields, finish with
 * fake_rec_end, which appends it to the log: a call's record lands when the call returns
 * (after the "exec" records of work it waited for). kinds: "call" (an API call on the
 * host), "exec" (work a stream worker ran), "violation", "injected", "mark".
 * Reserved keys: rec, fn, thread, status, seq. */
typedef struct fake_rec fake_rec;

FAKE_API fake_rec *fake_rec_begin(const char *kind, const char *fn);
FAKE_API void fake_rec_int(fake_rec *r, const char *key, long long v);
FAKE_API void fake_rec_uint(fake_rec *r, const char *key, unsigned long long v);
FAKE_API void fake_rec_double(fake_rec *r, const char *key, double v);
FAKE_API void fake_rec_str(fake_rec *r, const char *key, const char *v);
FAKE_API void fake_rec_ptr(fake_rec *r, const char *key, const void *p);
FAKE_API void fake_rec_ints(fake_rec *r, const char *key, const int *v, int n);
FAKE_API void fake_rec_i64s(fake_rec *r, const char *key, const int64_t *v, int n);
/* a raw JSON value (an object or array built by the caller) */
FAKE_API void fake_rec_raw(fake_rec *r, const char *key, const char *json);
/* ends the record with "status": status and returns status */
FAKE_API int fake_rec_end(fake_rec *r, int status);

/* A growable string for nested JSON values (descriptor dumps). */
typedef struct { char *s; size_t n, cap; } fake_buf;
FAKE_API void fake_buf_printf(fake_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
FAKE_API void fake_buf_free(fake_buf *b);

/* The log as a JSON array; valid until the next fake_log_json / fake_log_clear call. */
FAKE_API const char *fake_log_json(void);
FAKE_API void fake_log_clear(void);
/* a marker record {"rec": "mark", "fn": "<mark>", "label": label}, from tests */
FAKE_API void fake_log_mark(const char *label);
/* number of records so far (a cheap way to slice the log) */
FAKE_API long long fake_log_count(void);

/* ------------------------------------------------------------------ violations
 * Misuse the real library would turn into a crash or silent corruption (a host pointer
 * given to a kernel, an out-of-bounds extent, a destroyed handle): recorded as a
 * "violation" record and counted; tests assert fake_violations() == 0. */
FAKE_API void fake_violation(const char *fn, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
FAKE_API int fake_violations(void);

/* ------------------------------------------------------------------ failure injection
 * fake_inject("cudnnConvolutionForward", 2, 3000): the 2nd call of that function from now
 * on returns 3000 (without doing its work). count > 1 fails that many calls in a row.
 * A function calls fake_injected(name) first; non-zero means: return that status. */
FAKE_API void fake_inject(const char *fn, int nth, int status, int count);
FAKE_API void fake_inject_clear(void);
FAKE_API int fake_injected(const char *fn);

/* ------------------------------------------------------------------ handles
 * Every handle the fakes hand out is registered with a kind and a small id (for the log);
 * lookups of unknown or destroyed handles return 0 / NULL. */
enum {
    FAKE_KIND_NONE = 0, FAKE_KIND_STREAM, FAKE_KIND_EVENT, FAKE_KIND_POOL,
    FAKE_KIND_DNN_HANDLE, FAKE_KIND_DESCRIPTOR, FAKE_KIND_OTHER, FAKE_KIND_GRAPH,
    FAKE_KIND_GRAPH_EXEC
};
FAKE_API int fake_handle_register(void *h, int kind);      /* returns the id */
FAKE_API void fake_handle_unregister(void *h);
FAKE_API int fake_handle_kind(const void *h);
FAKE_API int fake_handle_id(const void *h);                 /* 0 if unknown */

/* ------------------------------------------------------------------ memory
 * Device memory is host memory registered here; freed memory is poisoned (0xFF bytes:
 * NaN in every float format) and quarantined, never reused, so a kernel that reads freed
 * memory computes NaN and a later lookup says "not device memory". */
enum { FAKE_MEM_DEVICE = 1, FAKE_MEM_HOST = 2, FAKE_MEM_MANAGED = 3 };
FAKE_API void *fake_mem_alloc(size_t nbytes, int kind);
FAKE_API int fake_mem_register(void *p, size_t nbytes, int kind);  /* host registration */
FAKE_API int fake_mem_free(void *p, int kind);   /* 0 ok; -1 not a live allocation of kind */
FAKE_API int fake_mem_unregister(void *p);
/* the live allocation containing p: 1 and its base/size/kind, else 0 */
FAKE_API int fake_mem_find(const void *p, void **base, size_t *size, int *kind);
/* 1 if [p, p + nbytes) lies in one live DEVICE/MANAGED allocation; else records a
 * violation naming fn and what, and returns 0 */
FAKE_API int fake_mem_check(const void *p, size_t nbytes, const char *fn, const char *what);
FAKE_API size_t fake_mem_in_use(void);
FAKE_API size_t fake_mem_total(void);

/* ------------------------------------------------------------------ streams and events */
typedef struct fake_stream fake_stream;
typedef struct fake_event fake_event;
typedef void (*fake_work_fn)(void *arg);

FAKE_API fake_stream *fake_stream_new(unsigned flags, int priority);
/* NULL handle: the default (legacy NULL) stream; an unknown handle: NULL + violation */
FAKE_API fake_stream *fake_stream_get(void *handle, const char *fn);
FAKE_API int fake_stream_id(fake_stream *s);
FAKE_API unsigned fake_stream_flags(fake_stream *s);
FAKE_API int fake_stream_priority(fake_stream *s);
/* run fn(arg) on the stream's worker after everything enqueued before; free_arg(arg)
 * afterwards (may be NULL). label names the work in the "exec" record. */
FAKE_API void fake_stream_enqueue(fake_stream *s, const char *label, fake_work_fn fn,
                                  void *arg, void (*free_arg)(void *));
FAKE_API void fake_stream_synchronize(fake_stream *s);
FAKE_API int fake_stream_idle(fake_stream *s);
/* work enqueued later waits (on the worker) for e's last record */
FAKE_API void fake_stream_wait_event(fake_stream *s, fake_event *e);
/* the stream ends once its work is done; later use of the handle is a violation */
FAKE_API void fake_stream_destroy(fake_stream *s);
FAKE_API void fake_device_synchronize(void);

FAKE_API fake_event *fake_event_new(unsigned flags);
FAKE_API fake_event *fake_event_get(void *handle, const char *fn);
FAKE_API int fake_event_id(fake_event *e);
FAKE_API unsigned fake_event_flags(fake_event *e);
FAKE_API void fake_event_record(fake_event *e, fake_stream *s);
FAKE_API int fake_event_done(fake_event *e);            /* 1: completed (or never recorded) */
FAKE_API void fake_event_synchronize(fake_event *e);
FAKE_API int fake_event_recorded(fake_event *e);       /* ever recorded */
FAKE_API double fake_event_time_ms(fake_event *e);     /* when its last record ran */
FAKE_API void fake_event_destroy(fake_event *e);

/* ------------------------------------------------------------------ stream capture, graphs
 * Between fake_stream_begin_capture and fake_stream_end_capture, work enqueued on the
 * stream (from any thread) is kept as a node of a graph instead of running. A graph is a
 * list of nodes run in order; an executable graph shares its graph's nodes (their
 * arguments live until the last graph, executable graph or launch using them is gone), and
 * one launch is one work item of the stream that runs every node. */
typedef struct fake_graph fake_graph;
/* 0: started; -1: the stream is capturing already */
FAKE_API int fake_stream_begin_capture(fake_stream *s);
FAKE_API int fake_stream_capturing(fake_stream *s);            /* 0 none, 1 active, 2 invalidated */
FAKE_API void fake_stream_invalidate_capture(fake_stream *s);
/* the captured graph (a new handle), NULL when the stream was not capturing or the
 * capture was invalidated (*invalidated = 1) */
FAKE_API fake_graph *fake_stream_end_capture(fake_stream *s, int *invalidated);
FAKE_API fake_graph *fake_graph_get(void *handle, int kind, const char *fn);
FAKE_API fake_graph *fake_graph_instantiate(fake_graph *g);   /* an executable graph of g */
/* 1: exec now runs g's nodes (same node count and functions); 0: the shapes differ */
FAKE_API int fake_graph_update(fake_graph *exec, fake_graph *g);
FAKE_API void fake_graph_launch(fake_graph *exec, fake_stream *s);
FAKE_API int fake_graph_id(fake_graph *g);
FAKE_API int fake_graph_nodes(fake_graph *g);
FAKE_API void fake_graph_destroy(fake_graph *g);

/* ------------------------------------------------------------------ devices
 * Several fake devices share one address space. The runtime fake tells the core the
 * calling thread's current device (cudaSetDevice); streams, events and DEVICE/MANAGED
 * allocations remember the device current when they were made, and a stream's worker runs
 * with its stream's device current. fake_mem_check also records a violation when the
 * memory belongs to another device than the calling thread's current one (a kernel of
 * device A given device B's memory: an illegal address without peer access). */
FAKE_API void fake_set_current_device(int device);
FAKE_API int fake_current_device(void);
FAKE_API int fake_mem_device(const void *p);           /* -1: not device memory */
FAKE_API int fake_stream_device(fake_stream *s);       /* -1: NULL or the default stream */
FAKE_API int fake_event_device(fake_event *e);         /* -1: NULL */

/* delay each stream worker waits before running an item (default 2000 us, or
 * $HIPDNN_ASYNC_FAKE_DELAY_US) */
FAKE_API void fake_set_delay_us(int us);
FAKE_API int fake_delay_us(void);

#ifdef __cplusplus
}
#endif
#endif
