/* A tiny fake cuDNN for the unit tests of runtime._cudnn and runtime._vendors (the contract
 * fakes of tests/contract/ are the thorough ones). -DVERSION=<cudnnGetVersion>.
 * cudnnCreate returns the status in $FAKE_CUDNN_STATUS (0 when unset). No tensor
 * descriptor calls are exported, so calling one shows the call-time missing-symbol error. */
#include <stdlib.h>
#include <string.h>
#include <stdio.h>

#ifndef VERSION
#define VERSION 91900
#endif

size_t cudnnGetVersion(void) { return VERSION; }
const char* cudnnGetErrorString(int s) {
    switch (s) {
    case 0: return "CUDNN_STATUS_SUCCESS";
    case 2002: return "CUDNN_STATUS_BAD_PARAM_NULL_POINTER";
    case 3000: return "CUDNN_STATUS_NOT_SUPPORTED";
    case 3999: return "CUDNN_STATUS_NOT_SUPPORTED_SOMETHING_NEWER";
    case 4000: return "CUDNN_STATUS_INTERNAL_ERROR";
    default: return "CUDNN_STATUS_UNKNOWN";
    }
}
void cudnnGetLastErrorString(char* buf, size_t n) { snprintf(buf, n, "fake last error"); }
int cudnnCreate(void** h) {
    const char* s = getenv("FAKE_CUDNN_STATUS");
    int st = s ? atoi(s) : 0;
    if (!st) *h = malloc(1);
    return st;
}
int cudnnDestroy(void* h) { free(h); return 0; }
int cudnnSetStream(void* h, void* s) { (void)h; (void)s; return 0; }
int cudnnConvolutionForward(void) { return 0; }
