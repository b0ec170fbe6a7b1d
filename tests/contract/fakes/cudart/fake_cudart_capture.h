/* Stream-capture checks shared by the fake runtime's files (fake_cudart_graph.c). */
#ifndef HIPDNN_ASYNC_FAKE_CUDART_CAPTURE_H
#define HIPDNN_ASYNC_FAKE_CUDART_CAPTURE_H

#include "fake_core.h"

/* 1 (and a violation; the calling thread's captures are invalidated) when the calling
 * thread is capturing in thread-local or global mode: an unsafe call must fail with
 * cudaErrorStreamCaptureUnsupported. */
int fake_capture_unsafe(const char *fn);
/* 1 (and a violation; the capture is invalidated) when s is capturing: `what` it. */
int fake_capture_on(fake_stream *s, const char *fn, const char *what);

#endif
