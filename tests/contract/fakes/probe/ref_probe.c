/* ref_probe.so: the reference kernels of ref_kernels.h exported for a direct test against
 * NumPy / ml_dtypes and the float64 oracle (tests/contract/test_ref_kernels.py). */
#include <stdint.h>
#include <string.h>

#include "ref_kernels.h"

#define API __attribute__((visibility("default")))

API void probe_half_to_float(const uint16_t *in, float *out, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] = ref_half_to_float(in[i]);
}
API void probe_float_to_half(const float *in, uint16_t *out, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] = ref_float_to_half(in[i]);
}
API void probe_bf16_to_float(const uint16_t *in, float *out, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] = ref_bf16_to_float(in[i]);
}
API void probe_float_to_bf16(const float *in, uint16_t *out, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] = ref_float_to_bf16(in[i]);
}

static void tensor(ref_tensor *t, int nd, const int64_t *dims, const int64_t *strides, double *data) {
    memset(t, 0, sizeof *t);
    t->dt = REF_F64;
    t->nd = nd;
    for (int i = 0; i < nd; i++) { t->dims[i] = dims[i]; t->strides[i] = strides[i]; }
    t->data = data;
}

/* which: 0 forward (y out), 1 backward data (x out), 2 backward filter (w out); float64
 * strided operands; pads symmetric (pad[i] before and after) */
API void probe_conv(int which, int nd, const int64_t *xd, const int64_t *xs, double *x,
                    const int64_t *wd, const int64_t *ws, double *w, const int64_t *yd,
                    const int64_t *ys, double *y, const int *pad, const int *stride,
                    const int *dilation, int groups, int flip, double alpha, double beta) {
    ref_tensor X, W, Y;
    tensor(&X, nd, xd, xs, x);
    tensor(&W, nd, wd, ws, w);
    tensor(&Y, nd, yd, ys, y);
    ref_conv p;
    memset(&p, 0, sizeof p);
    p.nsp = nd - 2;
    for (int i = 0; i < p.nsp; i++) { p.pad[i] = pad[i]; p.stride[i] = stride[i]; p.dilation[i] = dilation[i]; }
    p.groups = groups;
    p.flip = flip;
    ref_conv_run_dir(which, &p, &X, &W, &Y, alpha, beta);
}
