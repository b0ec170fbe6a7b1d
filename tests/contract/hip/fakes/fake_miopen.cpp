// libMIOpen.so.1 (fake): the MIOpen calls hipdnn_async uses, on the host.
//
// Compiled as C++ (miopen.h is C++ only) against the REAL miopen/miopen.h of one MIOpen
// release (Debian's libmiopen-dev 3.4.0 or 3.5.1, downloaded at test time): every exported
// function has the header's exact prototype, or this file does not compile. The entry
// points only MIOpen >= 3.5 declares (miopenExecuteFusionPlan_v2, the batchnorm
// *Activation calls, miopen{Get,Set}TuningPolicy) are exported only when built against
// that header, so a binding that needs them unconditionally fails against the 3.4.0 build.
//
// It links the fake HIP runtime (libamdhip64.so.N, which holds the shared fake core): every
// call is one record of the common JSON log (descriptors resolved), failure injection is
// the core's, kernels run the CPU reference (tests/contract/fakes/common/ref_kernels.h) on
// the buffers given, enqueued on the handle's fake HIP stream (later, in order, on a worker
// thread).
//
// Checks are stricter than MIOpen's where a real GPU would fault or silently misbehave
// (each a "violation" record plus miopenStatusBadParm): every buffer must be fake device
// memory covering its descriptor, a workspace must hold what the chosen solution needs, a
// fusion plan runs only on a handle it was compiled for. Workspaces are overwritten with
// NaN bytes when a kernel runs, so a caller that keeps data in a workspace it lends to
// MIOpen sees it destroyed.
//
// The solver catalog is the fake's own (ids illustrative, not MIOpen's): per direction a
// naive direct solver (no workspace), a GEMM solver (im2col workspace), a Winograd solver
// (larger workspace; 2-D 3x3 stride 1 only) and, for fprop, a 1x1 GEMM (no workspace).
// Heuristic times rank GEMM first; "measured" (tuned) times rank Winograd first, so
// benchmarking changes the choice where Winograd applies. Fusion (conv [+ bias] +
// activation) compiles for 2-D ungrouped problems, FLOAT only with MIOpen 3.4.0
// (Debian builds it without CK); $HIPDNN_ASYNC_FAKE_MIOPEN_FUSION = refuse | accept
// overrides that. MIOpen >= 3.5's fused solver needs a workspace (one x-sized buffer), so
// it runs only through miopenExecuteFusionPlan_v2.
#define MIOPEN_BETA_API 1
#include <miopen/miopen.h>
#include <miopen/version.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "fake_core.h"
#include "ref_kernels.h"

#define NEWER_MIOPEN (MIOPEN_VERSION_MAJOR > 3 || (MIOPEN_VERSION_MAJOR == 3 && MIOPEN_VERSION_MINOR >= 5))

namespace {

// ------------------------------------------------------------------ records
struct Rec {
  fake_rec* r;
  const char* fn;
  explicit Rec(const char* name) : r(fake_rec_begin("call", name)), fn(name) {}
  Rec& i(const char* k, long long v) { fake_rec_int(r, k, v); return *this; }
  Rec& u(const char* k, unsigned long long v) { fake_rec_uint(r, k, v); return *this; }
  Rec& d(const char* k, double v) { fake_rec_double(r, k, v); return *this; }
  Rec& p(const char* k, const void* v) { fake_rec_ptr(r, k, v); return *this; }
  Rec& s(const char* k, const std::string& v) { fake_rec_str(r, k, v.c_str()); return *this; }
  Rec& raw(const char* k, const std::string& json) { fake_rec_raw(r, k, json.c_str()); return *this; }
  miopenStatus_t end(miopenStatus_t st) {
    fake_rec_end(r, int(st));
    r = nullptr;
    return st;
  }
  ~Rec() {
    if (r) fake_rec_end(r, -1);
  }
};

// injected failure for this call (the core's fake_inject), or 0
#define INJECT(rec)                                   \
  do {                                                \
    int inj_ = fake_injected((rec).fn);               \
    if (inj_) return (rec).end(miopenStatus_t(inj_)); \
  } while (0)

// ------------------------------------------------------------------ objects
struct Handle {
  int id;
  hipStream_t stream;
  int policy = 1;   // miopenTuningPolicyNone
};

struct TensorDesc {
  int id = 0;
  bool set = false;
  miopenDataType_t dtype = miopenFloat;
  int nd = 0;
  int dims[8] = {0};
  int strides[8] = {0};
};

struct ConvDesc {
  int id = 0;
  bool set = false;
  int spatial = 0;
  int pad[3] = {0, 0, 0};
  int stride[3] = {1, 1, 1};
  int dilation[3] = {1, 1, 1};
  int mode = 0;
  int groups = 1;
  int deterministic = -1;   // never set
};

struct ActivDesc {
  int id = 0;
  bool set = false;
  int mode = 0;
  double a = 0, b = 0, g = 0;
};

enum class OpKind { Conv, Bias, Activ };
struct FusionOp {
  int id = 0;
  OpKind kind = OpKind::Conv;
  ConvDesc conv;
  TensorDesc tensor;   // w (conv) or bias
  int mode = 0;        // activation
};

struct FusionPlan {
  int id = 0;
  TensorDesc input;
  std::vector<FusionOp*> ops;
  std::set<int> compiled_on;   // handle ids
};

struct OpArgVals {
  const void* ptr = nullptr;
  double a = 0, b = 0, g = 0;
};
struct OpArgs {
  int id = 0;
  std::map<int, OpArgVals> vals;   // op id -> values
};

struct Problem {
  int id = 0;
  ConvDesc conv;
  int direction = 0;
  std::map<int, TensorDesc> tensors;   // miopenTensorArgumentId_t -> desc
};

struct FindOptions {
  int id = 0;
  int tuning = 0;
  size_t ws_limit = std::numeric_limits<size_t>::max();
  int order = 0;
  void* ws = nullptr;
  size_t ws_size = 0;
  std::map<int, void*> tensors;
};

struct Solution {
  int id = 0;
  uint64_t solver = 0;
  size_t ws = 0;
  float time = 0;
};

// pointer -> object, per kind; ids count from 1 per kind (for the log)
template <class T>
struct Registry {
  std::mutex mu;
  std::map<const void*, std::unique_ptr<T>> objs;
  int next = 1;
  T* add(std::unique_ptr<T> o) {
    std::lock_guard<std::mutex> g(mu);
    o->id = next++;
    T* raw = o.get();
    objs[raw] = std::move(o);
    return raw;
  }
  T* get(const void* p) {
    std::lock_guard<std::mutex> g(mu);
    auto it = objs.find(p);
    return it == objs.end() ? nullptr : it->second.get();
  }
  bool remove(const void* p) {
    std::lock_guard<std::mutex> g(mu);
    return objs.erase(p) > 0;
  }
  size_t size() {
    std::lock_guard<std::mutex> g(mu);
    return objs.size();
  }
};

Registry<Handle> g_handles;
Registry<TensorDesc> g_tensors;
Registry<ConvDesc> g_convs;
Registry<ActivDesc> g_activs;
Registry<FusionPlan> g_plans;
Registry<FusionOp> g_ops;
Registry<OpArgs> g_args;
Registry<Problem> g_problems;
Registry<FindOptions> g_options;
Registry<Solution> g_solutions;

int policy_from_env() {
  const char* v = std::getenv("HIPDNN_ASYNC_FAKE_MIOPEN_FUSION");
  if (!v) return 0;
  std::string s(v);
  return s == "refuse" ? 1 : s == "accept" ? 2 : 0;
}
int g_fusion_policy = policy_from_env();

// ------------------------------------------------------------------ JSON of descriptors
std::string ints_json(const int* v, int n) {
  std::string s = "[";
  for (int i = 0; i < n; ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

std::string tensor_json(const TensorDesc* t) {
  if (!t) return "null";
  return "{\"id\": " + std::to_string(t->id) + ", \"dtype\": " + std::to_string(int(t->dtype)) +
         ", \"dims\": " + ints_json(t->dims, t->nd) + ", \"strides\": " + ints_json(t->strides, t->nd) + "}";
}

std::string conv_json(const ConvDesc* c) {
  if (!c) return "null";
  return "{\"id\": " + std::to_string(c->id) + ", \"pad\": " + ints_json(c->pad, c->spatial) +
         ", \"stride\": " + ints_json(c->stride, c->spatial) + ", \"dilation\": " +
         ints_json(c->dilation, c->spatial) + ", \"mode\": " + std::to_string(c->mode) +
         ", \"groups\": " + std::to_string(c->groups) + ", \"deterministic\": " +
         std::to_string(c->deterministic) + "}";
}

std::string activ_json(const ActivDesc* a) {
  if (!a) return "null";
  char buf[256];
  std::snprintf(buf, sizeof buf, "{\"id\": %d, \"mode\": %d, \"alpha\": %.17g, \"beta\": %.17g, \"gamma\": %.17g}",
                a->id, a->mode, a->a, a->b, a->g);
  return buf;
}

Rec& tensor_field(Rec& r, const char* key, const void* d) {
  return r.raw(key, d ? tensor_json(g_tensors.get(d)) : "null");
}

// ------------------------------------------------------------------ helpers
bool io_dtype(miopenDataType_t t) { return t == miopenFloat || t == miopenHalf || t == miopenBFloat16; }

ref_tensor rt(const TensorDesc& d, const void* p) {
  ref_tensor t;
  std::memset(&t, 0, sizeof t);
  t.dt = d.dtype == miopenFloat ? REF_F32 : d.dtype == miopenHalf ? REF_F16 : REF_BF16;
  t.nd = d.nd;
  for (int i = 0; i < d.nd; ++i) {
    t.dims[i] = d.dims[i];
    t.strides[i] = d.strides[i];
  }
  t.data = const_cast<void*>(p);
  return t;
}
size_t extent(const TensorDesc& d) {
  ref_tensor t = rt(d, nullptr);
  return ref_extent_bytes(&t);
}

// [p, p + extent) is fake device memory; else a violation record and false
bool mem_ok(const char* fn, const char* what, const void* p, size_t n) {
  return n == 0 || fake_mem_check(p, n, fn, what);
}

bool same_dims(const TensorDesc& a, const TensorDesc& b) {
  if (a.nd != b.nd) return false;
  for (int i = 0; i < a.nd; ++i)
    if (a.dims[i] != b.dims[i]) return false;
  return true;
}

// packed strides with dims listed slowest first in `order`
bool packed_in(const TensorDesc& d, const std::vector<int>& order) {
  long long s = 1;
  for (int k = int(order.size()) - 1; k >= 0; --k) {
    int i = order[k];
    if (d.dims[i] != 1 && d.strides[i] != s) return false;
    s *= d.dims[i];
  }
  return true;
}
// layout families the strides read as: bit 0 channel-first (NCHW / NCDHW), bit 1
// channel-last (NHWC / NDHWC); 0 for anything else (not packed)
int layouts(const TensorDesc& d) {
  std::vector<int> first, last = {0};
  for (int i = 0; i < d.nd; ++i) first.push_back(i);
  for (int i = 2; i < d.nd; ++i) last.push_back(i);
  last.push_back(1);
  return (packed_in(d, first) ? 1 : 0) | (packed_in(d, last) ? 2 : 0);
}

float host_scalar(const void* p, float dflt) { return p ? *static_cast<const float*>(p) : dflt; }

// Run fn on the handle's fake HIP stream as a kernel ("exec" record `label` when it ran).
miopenStatus_t launch(Handle* h, const char* label, std::function<void()> fn) {
  fake_stream* s = fake_stream_get(static_cast<void*>(h->stream), label);
  if (!s) return miopenStatusBadParm;
  auto* heap = new std::function<void()>(std::move(fn));
  fake_stream_enqueue(s, label, [](void* c) { (*static_cast<std::function<void()>*>(c))(); }, heap,
                      [](void* c) { delete static_cast<std::function<void()>*>(c); });
  return miopenStatusSuccess;
}

void scribble(void* ws, size_t n) {
  if (ws && n) std::memset(ws, 0xFF, n);   // NaN in every float format
}

bool act_ref(int mode, double a, double b, ref_act* out) {
  std::memset(out, 0, sizeof *out);
  out->propagate_nan = 1;
  switch (mode) {
    case miopenActivationPASTHRU: out->mode = REF_ACT_IDENTITY; return true;
    case miopenActivationRELU: out->mode = REF_ACT_RELU; return true;
    case miopenActivationCLIPPEDRELU: out->mode = REF_ACT_CLIPPED_RELU; out->upper = a; return true;
    case miopenActivationLEAKYRELU: out->mode = REF_ACT_LEAKY_RELU; out->lower = a; return true;
#if NEWER_MIOPEN
    case miopenActivationCLAMP: out->mode = REF_ACT_CLAMP; out->lower = a; out->upper = b; return true;
#endif
    default: (void)b; return false;   // not modelled by this fake
  }
}

bool known_activation(int mode) {
#if NEWER_MIOPEN
  return mode >= miopenActivationPASTHRU && mode <= miopenActivationCLAMP;
#else
  return mode >= miopenActivationPASTHRU && mode <= miopenActivationELU;
#endif
}

// ------------------------------------------------------------------ convolution problems
enum Dir { FWD = 0, BWD = 1, WRW = 2 };

struct ConvProb {
  int dir = 0;
  TensorDesc x, w, y;   // x = dx for BWD, w = dw for WRW, y = dy for BWD and WRW
  ConvDesc c;
};

// miopenStatusSuccess when well formed; *packed says whether the fake's solvers take the
// layouts (all three packed in one family)
miopenStatus_t check_prob(const ConvProb& p, bool* packed) {
  const TensorDesc &x = p.x, &w = p.w, &y = p.y;
  if (!x.set || !w.set || !y.set || !p.c.set) return miopenStatusNotInitialized;
  int S = p.c.spatial;
  if (p.c.mode != miopenConvolution) return miopenStatusNotImplemented;
  if (x.nd != S + 2 || w.nd != S + 2 || y.nd != S + 2) return miopenStatusBadParm;
  if (x.dtype != w.dtype || x.dtype != y.dtype || !io_dtype(x.dtype)) return miopenStatusBadParm;
  int g = p.c.groups;
  if (w.dims[1] * g != x.dims[1] || w.dims[0] % g != 0) return miopenStatusBadParm;
  if (y.dims[0] != x.dims[0] || y.dims[1] != w.dims[0]) return miopenStatusBadParm;
  for (int s = 0; s < S; ++s) {
    int o = (x.dims[2 + s] + 2 * p.c.pad[s] - p.c.dilation[s] * (w.dims[2 + s] - 1) - 1) / p.c.stride[s] + 1;
    if (o != y.dims[2 + s]) return miopenStatusBadParm;
  }
  *packed = (layouts(x) & layouts(w) & layouts(y)) != 0;
  return miopenStatusSuccess;
}

struct Solver {
  uint64_t id;
  int dir;
  miopenConvAlgorithm_t algo;
  float heuristic_ms;
  float tuned_ms;
};
const Solver kSolvers[] = {
    {85, FWD, miopenConvolutionAlgoDirect, 10.f, 9.f},
    {26, FWD, miopenConvolutionAlgoGEMM, 1.f, 1.5f},   // 1x1 only
    {27, FWD, miopenConvolutionAlgoGEMM, 2.f, 3.f},
    {53, FWD, miopenConvolutionAlgoWinograd, 4.f, 0.5f},
    {86, BWD, miopenConvolutionAlgoDirect, 10.f, 9.f},
    {32, BWD, miopenConvolutionAlgoGEMM, 2.f, 3.f},
    {54, BWD, miopenConvolutionAlgoWinograd, 4.f, 0.5f},
    {87, WRW, miopenConvolutionAlgoDirect, 10.f, 9.f},
    {36, WRW, miopenConvolutionAlgoGEMM, 2.f, 3.f},
    {55, WRW, miopenConvolutionAlgoWinograd, 4.f, 0.5f},
};

const Solver* solver_by_id(uint64_t id) {
  for (const auto& s : kSolvers)
    if (s.id == id) return &s;
  return nullptr;
}

bool applicable(const Solver& s, const ConvProb& p) {
  bool packed = false;
  if (s.dir != p.dir || check_prob(p, &packed) != miopenStatusSuccess || !packed) return false;
  switch (s.id) {
    case 85: case 86: case 87: return true;
    case 26:
      if (p.c.groups != 1) return false;
      for (int i = 0; i < p.c.spatial; ++i)
        if (p.w.dims[2 + i] != 1 || p.c.stride[i] != 1 || p.c.pad[i] != 0) return false;
      return true;
    case 27: case 32: case 36: return p.c.groups == 1;
    default:   // Winograd: 2-D, 3x3, stride 1, dilation 1, ungrouped, not bfloat16
      if (p.c.spatial != 2 || p.c.groups != 1 || p.x.dtype == miopenBFloat16) return false;
      for (int i = 0; i < 2; ++i)
        if (p.w.dims[2 + i] != 3 || p.c.stride[i] != 1 || p.c.dilation[i] != 1) return false;
      return true;
  }
}

size_t ws_of(const Solver& s, const ConvProb& p) {
  size_t esz = p.x.dtype == miopenFloat ? 4 : 2;
  size_t k = 1, out = 1;
  for (int i = 0; i < p.c.spatial; ++i) {
    k *= size_t(p.w.dims[2 + i]);
    out *= size_t(p.y.dims[2 + i]);
  }
  size_t cg = size_t(p.w.dims[1]);
  if (s.algo == miopenConvolutionAlgoDirect || s.id == 26) return 0;
  if (s.algo == miopenConvolutionAlgoGEMM) return cg * k * out * esz;   // im2col of one image
  return 16 * size_t(p.w.dims[0]) * cg * esz + extent(p.y);
}

std::vector<const Solver*> solvers_for(const ConvProb& p, bool tuned) {
  // $HIPDNN_ASYNC_FAKE_MIOPEN_NO_NAIVE: the naive solvers are left out (as MIOpen's
  // MIOPEN_DEBUG_CONV_DIRECT_NAIVE_* switches do), so every solution needs a workspace
  bool naive = std::getenv("HIPDNN_ASYNC_FAKE_MIOPEN_NO_NAIVE") == nullptr;
  std::vector<const Solver*> out;
  for (const auto& s : kSolvers)
    if (applicable(s, p) && (naive || s.algo != miopenConvolutionAlgoDirect)) out.push_back(&s);
  std::stable_sort(out.begin(), out.end(), [&](const Solver* a, const Solver* b) {
    return tuned ? a->tuned_ms < b->tuned_ms : a->heuristic_ms < b->heuristic_ms;
  });
  return out;
}

// a, b, c: the descriptors in the immediate-mode argument order: FWD (w, x, y);
// BWD (dy, w, dx); WRW (dy, x, dw)
miopenStatus_t make_prob(int dir, const void* a, const void* b, const void* conv, const void* c, ConvProb* out) {
  TensorDesc *A = g_tensors.get(a), *B = g_tensors.get(b), *C = g_tensors.get(c);
  ConvDesc* cd = g_convs.get(conv);
  if (!A || !B || !C || !cd) return miopenStatusBadParm;
  out->dir = dir;
  out->c = *cd;
  if (dir == FWD) { out->w = *A; out->x = *B; out->y = *C; }
  else if (dir == BWD) { out->y = *A; out->w = *B; out->x = *C; }
  else { out->y = *A; out->x = *B; out->w = *C; }
  bool packed;
  return check_prob(*out, &packed);
}

void run_conv(const ConvProb& p, const void* x, const void* w, const void* y) {
  ref_conv cp;
  std::memset(&cp, 0, sizeof cp);
  cp.nsp = p.c.spatial;
  for (int i = 0; i < p.c.spatial; ++i) {
    cp.pad[i] = p.c.pad[i];
    cp.stride[i] = p.c.stride[i];
    cp.dilation[i] = p.c.dilation[i];
  }
  cp.groups = p.c.groups;
  ref_tensor xt = rt(p.x, x), wt = rt(p.w, w), yt = rt(p.y, y);
  ref_conv_run_dir(p.dir, &cp, &xt, &wt, &yt, 1.0, 0.0);
}

const char* kDescNames[3][3] = {{"wDesc", "xDesc", "yDesc"}, {"dyDesc", "wDesc", "dxDesc"},
                                {"dyDesc", "xDesc", "dwDesc"}};
const char* kPtrNames[3][3] = {{"w", "x", "y"}, {"dy", "w", "dx"}, {"dy", "x", "dw"}};

Rec& log_prob(Rec& r, int dir, const void* h, const void* a, const void* b, const void* conv, const void* c) {
  Handle* hh = g_handles.get(h);
  r.i("handle", hh ? hh->id : 0);
  tensor_field(r, kDescNames[dir][0], a);
  tensor_field(r, kDescNames[dir][1], b);
  r.raw("convDesc", conv_json(g_convs.get(conv)));
  return tensor_field(r, kDescNames[dir][2], c);
}

// ------------------------------------------------ the five immediate-mode calls, per direction
miopenStatus_t solution_count(const char* fn, int dir, miopenHandle_t h, const void* a, const void* b,
                              const void* conv, const void* c, size_t* n) {
  Rec r(fn);
  log_prob(r, dir, h, a, b, conv, c);
  INJECT(r);
  ConvProb p;
  miopenStatus_t st = g_handles.get(h) && n ? make_prob(dir, a, b, conv, c, &p) : miopenStatusBadParm;
  if (st != miopenStatusSuccess) return r.end(st);
  *n = solvers_for(p, false).size();
  r.u("count", *n);
  return r.end(st);
}

miopenStatus_t get_solution(const char* fn, int dir, miopenHandle_t h, const void* a, const void* b,
                            const void* conv, const void* c, size_t max, size_t* n, miopenConvSolution_t* sols) {
  Rec r(fn);
  log_prob(r, dir, h, a, b, conv, c);
  r.u("max", max);
  INJECT(r);
  ConvProb p;
  miopenStatus_t st = g_handles.get(h) && n && sols ? make_prob(dir, a, b, conv, c, &p) : miopenStatusBadParm;
  if (st != miopenStatusSuccess) return r.end(st);
  auto list = solvers_for(p, false);
  size_t k = std::min(max, list.size());
  std::string json = "[";
  for (size_t i = 0; i < k; ++i) {
    sols[i].time = list[i]->heuristic_ms;
    sols[i].workspace_size = ws_of(*list[i], p);
    sols[i].solution_id = list[i]->id;
    sols[i].algorithm = list[i]->algo;
    json += std::string(i ? ", " : "") + "{\"id\": " + std::to_string(list[i]->id) + ", \"algorithm\": " +
            std::to_string(int(list[i]->algo)) + ", \"workspace\": " + std::to_string(sols[i].workspace_size) +
            ", \"time\": " + std::to_string(list[i]->heuristic_ms) + "}";
  }
  *n = k;
  r.raw("solutions", json + "]");
  return r.end(st);
}

miopenStatus_t solution_ws(const char* fn, int dir, miopenHandle_t h, const void* a, const void* b,
                           const void* conv, const void* c, uint64_t id, size_t* ws) {
  Rec r(fn);
  log_prob(r, dir, h, a, b, conv, c);
  r.u("solution_id", id);
  INJECT(r);
  ConvProb p;
  miopenStatus_t st = g_handles.get(h) && ws ? make_prob(dir, a, b, conv, c, &p) : miopenStatusBadParm;
  const Solver* s = solver_by_id(id);
  if (st == miopenStatusSuccess && (!s || !applicable(*s, p))) st = miopenStatusBadParm;
  if (st != miopenStatusSuccess) return r.end(st);
  *ws = ws_of(*s, p);
  r.u("workspace", *ws);
  return r.end(st);
}

miopenStatus_t compile_solution(const char* fn, int dir, miopenHandle_t h, const void* a, const void* b,
                                const void* conv, const void* c, uint64_t id) {
  Rec r(fn);
  log_prob(r, dir, h, a, b, conv, c);
  r.u("solution_id", id);
  INJECT(r);
  ConvProb p;
  miopenStatus_t st = g_handles.get(h) ? make_prob(dir, a, b, conv, c, &p) : miopenStatusBadParm;
  const Solver* s = solver_by_id(id);
  if (st == miopenStatusSuccess && (!s || !applicable(*s, p))) st = miopenStatusBadParm;
  return r.end(st);
}

miopenStatus_t immediate(const char* fn, int dir, miopenHandle_t handle, const void* a, const void* a_ptr,
                         const void* b, const void* b_ptr, const void* conv, const void* c, void* c_ptr,
                         void* ws, size_t ws_size, uint64_t id) {
  Rec r(fn);
  log_prob(r, dir, handle, a, b, conv, c);
  r.p(kPtrNames[dir][0], a_ptr).p(kPtrNames[dir][1], b_ptr).p(kPtrNames[dir][2], c_ptr)
      .p("workSpace", ws).u("workSpaceSize", ws_size).u("solution_id", id);
  INJECT(r);
  Handle* h = g_handles.get(handle);
  ConvProb p;
  miopenStatus_t st = h ? make_prob(dir, a, b, conv, c, &p) : miopenStatusBadParm;
  if (st != miopenStatusSuccess) return r.end(st);
  const Solver* s = solver_by_id(id);
  if (!s || !applicable(*s, p)) return r.end(miopenStatusBadParm);
  size_t need = ws_of(*s, p);
  if (ws_size < need) {
    fake_violation(fn, "workspace of %zu bytes; solution %llu needs %zu", ws_size, (unsigned long long)id, need);
    return r.end(miopenStatusBadParm);
  }
  const TensorDesc* descs[3] = {g_tensors.get(a), g_tensors.get(b), g_tensors.get(c)};
  const void* ptrs[3] = {a_ptr, b_ptr, c_ptr};
  for (int i = 0; i < 3; ++i)
    if (!mem_ok(fn, kPtrNames[dir][i], ptrs[i], extent(*descs[i]))) return r.end(miopenStatusBadParm);
  if (ws_size && !mem_ok(fn, "workSpace", ws, ws_size)) return r.end(miopenStatusBadParm);
  const void *x, *w, *y;
  if (dir == FWD) { w = a_ptr; x = b_ptr; y = c_ptr; }
  else if (dir == BWD) { y = a_ptr; w = b_ptr; x = c_ptr; }
  else { y = a_ptr; x = b_ptr; w = c_ptr; }
  return r.end(launch(h, fn, [p, x, w, y, ws, need] {
    scribble(ws, need);
    run_conv(p, x, w, y);
  }));
}

// ------------------------------------------------------------------ batchnorm helpers
struct BnDescs {
  TensorDesc x, y, scale, bias, mean, var;
};

miopenStatus_t check_bn(const char* fn, miopenBatchNormMode_t mode, const void* xd, const void* yd, const void* sd,
                        const void* bd, const void* md, const void* vd, BnDescs* out) {
  if (mode != miopenBNSpatial) return miopenStatusNotImplemented;   // the fake models spatial only
  TensorDesc *x = g_tensors.get(xd), *y = g_tensors.get(yd);
  if (!x || !y || !x->set || !y->set) return miopenStatusBadParm;
  if (!same_dims(*x, *y) || x->dtype != y->dtype || !io_dtype(x->dtype)) return miopenStatusBadParm;
  if (x->nd != 4 && x->nd != 5) return miopenStatusBadParm;
  if ((layouts(*x) & layouts(*y)) == 0) return miopenStatusNotImplemented;   // packed layouts only
  out->x = *x;
  out->y = *y;
  const void* pd[4] = {sd, bd, md, vd};
  TensorDesc* dst[4] = {&out->scale, &out->bias, &out->mean, &out->var};
  for (int k = 0; k < 4; ++k) {
    TensorDesc* d = g_tensors.get(pd[k]);
    // MIOpen 3.x's (non-CK) kernels: FLOAT per-channel tensors of dims (1, C, 1, 1[, 1])
    if (!d || !d->set || d->nd != x->nd || d->dtype != miopenFloat) {
      fake_violation(fn, "per-channel descriptor %d is not FLOAT with x's rank", k);
      return miopenStatusBadParm;
    }
    for (int i = 0; i < d->nd; ++i)
      if (d->dims[i] != (i == 1 ? x->dims[1] : 1)) return miopenStatusBadParm;
    *dst[k] = *d;
  }
  return miopenStatusSuccess;
}

bool chan_ok(const char* fn, const char* what, const void* p, const TensorDesc& d) {
  return mem_ok(fn, what, p, extent(d)) && p != nullptr;
}

void log_bn_io(Rec& r, miopenHandle_t h, int mode, const void* xd, const void* x, const void* yd, const void* y) {
  Handle* hh = g_handles.get(h);
  r.i("handle", hh ? hh->id : 0).i("mode", mode);
  tensor_field(r, "xDesc", xd).p("x", x);
  tensor_field(r, "yDesc", yd).p("y", y);
}

void log_bn_params(Rec& r, const char* names[4], const void* sd, const void* bd, const void* md, const void* vd) {
  tensor_field(r, names[0], sd);
  tensor_field(r, names[1], bd);
  tensor_field(r, names[2], md);
  tensor_field(r, names[3], vd);
}

miopenStatus_t activ_for(const void* activ, ActivDesc* out, ref_act* ra) {
  if (!activ) return miopenStatusSuccess;
  ActivDesc* a = g_activs.get(activ);
  if (!a || !a->set) return miopenStatusBadParm;
  *out = *a;
  return act_ref(a->mode, a->a, a->b, ra) ? miopenStatusSuccess : miopenStatusNotImplemented;
}

miopenStatus_t bn_inference(const char* fn, miopenHandle_t handle, miopenBatchNormMode_t mode, void* alpha,
                            void* beta, const void* xd, const void* x, const void* yd, void* y, const void* sd,
                            const void* bd, const void* md, const void* vd, void* scale, void* bias, void* mean,
                            void* var, double eps, const void* activ) {
  Rec r(fn);
  log_bn_io(r, handle, mode, xd, x, yd, y);
  static const char* names[4] = {"scaleDesc", "biasDesc", "estMeanDesc", "estVarianceDesc"};
  log_bn_params(r, names, sd, bd, md, vd);
  r.d("alpha", host_scalar(alpha, NAN)).d("beta", host_scalar(beta, NAN)).p("bnScale", scale).p("bnBias", bias)
      .p("estimatedMean", mean).p("estimatedVariance", var).d("epsilon", eps);
  if (activ) r.raw("activDesc", activ_json(g_activs.get(activ)));
  INJECT(r);
  Handle* h = g_handles.get(handle);
  BnDescs d;
  miopenStatus_t st = h ? check_bn(fn, mode, xd, yd, sd, bd, md, vd, &d) : miopenStatusBadParm;
  ActivDesc act;
  ref_act ra;
  if (st == miopenStatusSuccess) st = activ_for(activ, &act, &ra);
  if (st != miopenStatusSuccess) return r.end(st);
  if (!(eps > 0)) return r.end(miopenStatusBadParm);
  if (!mem_ok(fn, "x", x, extent(d.x)) || !mem_ok(fn, "y", y, extent(d.y)) || !chan_ok(fn, "bnScale", scale, d.scale) ||
      !chan_ok(fn, "bnBias", bias, d.bias) || !chan_ok(fn, "estimatedMean", mean, d.mean) ||
      !chan_ok(fn, "estimatedVariance", var, d.var))
    return r.end(miopenStatusBadParm);
  double al = host_scalar(alpha, 1), be = host_scalar(beta, 0);
  bool has_act = activ != nullptr;
  return r.end(launch(h, fn, [=] {
    ref_tensor xt = rt(d.x, x), yt = rt(d.y, y), s = rt(d.scale, scale), b = rt(d.bias, bias), m = rt(d.mean, mean),
               v = rt(d.var, var);
    ref_bn_inference(&xt, &yt, &s, &b, &m, &v, eps, has_act ? &ra : nullptr, al, be);
  }));
}

miopenStatus_t bn_training(const char* fn, miopenHandle_t handle, miopenBatchNormMode_t mode, void* alpha,
                           void* beta, const void* xd, const void* x, const void* yd, void* y, const void* sd,
                           const void* bd, const void* md, const void* vd, void* scale, void* bias, double factor,
                           void* run_mean, void* run_var, double eps, void* save_mean, void* save_inv,
                           const void* activ) {
  Rec r(fn);
  log_bn_io(r, handle, mode, xd, x, yd, y);
  static const char* names[4] = {"scaleDesc", "biasVarDesc", "savedMeanDesc", "savedVarDesc"};
  log_bn_params(r, names, sd, bd, md, vd);
  r.d("alpha", host_scalar(alpha, NAN)).d("beta", host_scalar(beta, NAN)).p("bnScale", scale).p("bnBias", bias)
      .d("expAvgFactor", factor).p("resultRunningMean", run_mean).p("resultRunningVariance", run_var)
      .d("epsilon", eps).p("resultSaveMean", save_mean).p("resultSaveInvVariance", save_inv);
  if (activ) r.raw("activDesc", activ_json(g_activs.get(activ)));
  INJECT(r);
  Handle* h = g_handles.get(handle);
  BnDescs d;
  miopenStatus_t st = h ? check_bn(fn, mode, xd, yd, sd, bd, md, vd, &d) : miopenStatusBadParm;
  ActivDesc act;
  ref_act ra;
  if (st == miopenStatusSuccess) st = activ_for(activ, &act, &ra);
  if (st != miopenStatusSuccess) return r.end(st);
  ref_tensor probe = rt(d.x, nullptr);
  if (!(eps > 0) || ref_count(&probe) / d.x.dims[1] <= 1 || (!run_mean) != (!run_var))
    return r.end(miopenStatusBadParm);
  auto opt = [&](const char* what, const void* p, const TensorDesc& td) { return !p || chan_ok(fn, what, p, td); };
  if (!mem_ok(fn, "x", x, extent(d.x)) || !mem_ok(fn, "y", y, extent(d.y)) || !chan_ok(fn, "bnScale", scale, d.scale) ||
      !chan_ok(fn, "bnBias", bias, d.bias) || !opt("resultRunningMean", run_mean, d.mean) ||
      !opt("resultRunningVariance", run_var, d.var) || !opt("resultSaveMean", save_mean, d.mean) ||
      !opt("resultSaveInvVariance", save_inv, d.var))
    return r.end(miopenStatusBadParm);
  double al = host_scalar(alpha, 1), be = host_scalar(beta, 0);
  bool has_act = activ != nullptr;
  return r.end(launch(h, fn, [=] {
    ref_tensor xt = rt(d.x, x), yt = rt(d.y, y), s = rt(d.scale, scale), b = rt(d.bias, bias);
    ref_tensor rm = rt(d.mean, run_mean), rv = rt(d.var, run_var), sm = rt(d.mean, save_mean), si = rt(d.var, save_inv);
    // MIOpen: running = batch * factor + running * (1 - factor), variance unbiased
    ref_bn_training(&xt, &yt, &s, &b, factor, run_mean ? &rm : nullptr, run_var ? &rv : nullptr, eps,
                    save_mean ? &sm : nullptr, save_inv ? &si : nullptr, has_act ? &ra : nullptr, al, be);
  }));
}

miopenStatus_t bn_backward(const char* fn, miopenHandle_t handle, miopenBatchNormMode_t mode, const void* ad,
                           const void* bd_, const void* ap, const void* bp, const void* xd, const void* x,
                           const void* dyd, const void* dy, const void* dxd, void* dx, const void* sd,
                           const void* biasd, const void* md, const void* vd, const void* scale, const void* bias,
                           void* dscale, void* dbias, double eps, const void* saved_mean, const void* saved_inv,
                           const void* activ, bool has_bias_arg) {
  Rec r(fn);
  Handle* hh = g_handles.get(handle);
  r.i("handle", hh ? hh->id : 0).i("mode", mode).d("alphaDataDiff", host_scalar(ad, NAN))
      .d("betaDataDiff", host_scalar(bd_, NAN)).d("alphaParamDiff", host_scalar(ap, NAN))
      .d("betaParamDiff", host_scalar(bp, NAN));
  tensor_field(r, "xDesc", xd).p("x", x);
  tensor_field(r, "dyDesc", dyd).p("dy", dy);
  tensor_field(r, "dxDesc", dxd).p("dx", dx);
  static const char* names[4] = {"scaleDesc", "biasDesc", "savedMeanDesc", "savedVarDesc"};
  log_bn_params(r, names, sd, biasd, md, vd);
  r.p("bnScale", scale);
  if (has_bias_arg) r.p("bnBias", bias);
  r.p("resultBnScaleDiff", dscale).p("resultBnBiasDiff", dbias).d("epsilon", eps).p("savedMean", saved_mean)
      .p("savedInvVariance", saved_inv);
  if (has_bias_arg) r.raw("activDesc", activ ? activ_json(g_activs.get(activ)) : "null");
  INJECT(r);
  Handle* h = hh;
  BnDescs d;
  miopenStatus_t st = h ? check_bn(fn, mode, xd, dxd, sd, biasd, md, vd, &d) : miopenStatusBadParm;
  TensorDesc* dyt = g_tensors.get(dyd);
  if (st == miopenStatusSuccess &&
      (!dyt || !same_dims(*dyt, d.x) || dyt->dtype != d.x.dtype || (layouts(*dyt) & layouts(d.x)) == 0))
    st = miopenStatusBadParm;
  ActivDesc act;
  ref_act ra;
  if (st == miopenStatusSuccess) st = activ_for(activ, &act, &ra);
  if (st != miopenStatusSuccess) return r.end(st);
  if (!(eps > 0) || (!saved_mean) != (!saved_inv)) return r.end(miopenStatusBadParm);
  TensorDesc dyc = *dyt;
  if (!mem_ok(fn, "x", x, extent(d.x)) || !mem_ok(fn, "dy", dy, extent(dyc)) || !mem_ok(fn, "dx", dx, extent(d.y)) ||
      !chan_ok(fn, "bnScale", scale, d.scale) || !chan_ok(fn, "resultBnScaleDiff", dscale, d.scale) ||
      !chan_ok(fn, "resultBnBiasDiff", dbias, d.bias) || (activ && !chan_ok(fn, "bnBias", bias, d.bias)) ||
      (saved_mean && !chan_ok(fn, "savedMean", saved_mean, d.mean)) ||
      (saved_inv && !chan_ok(fn, "savedInvVariance", saved_inv, d.var)))
    return r.end(miopenStatusBadParm);
  double a1 = host_scalar(ad, 1), b1 = host_scalar(bd_, 0), a2 = host_scalar(ap, 1), b2 = host_scalar(bp, 0);
  bool has_act = activ != nullptr;
  return r.end(launch(h, fn, [=] {
    ref_tensor xt = rt(d.x, x), dyt2 = rt(dyc, dy), dxt = rt(d.y, dx), s = rt(d.scale, scale);
    ref_tensor dst = rt(d.scale, dscale), dbt = rt(d.bias, dbias), sm = rt(d.mean, saved_mean), si = rt(d.var, saved_inv);
    std::vector<float> masked;
    ref_tensor g = dyt2;
    if (has_act) {
      // dy masked by the activation's gradient at the recomputed forward output
      // y_bn = scale * (x - mean) * inv + bias (the saved statistics, or recomputed)
      int64_t C = xt.dims[1];
      std::vector<double> mean(C), inv(C), var(C), sc(C), bi(C);
      if (saved_mean) {
        ref_read_channels(&sm, C, mean.data());
        ref_read_channels(&si, C, inv.data());
      } else {
        ref_bn_stats(&xt, mean.data(), var.data());
        for (int64_t c = 0; c < C; ++c) inv[c] = 1.0 / std::sqrt(var[c] + eps);
      }
      ref_tensor bt = rt(d.bias, bias);
      ref_read_channels(&s, C, sc.data());
      ref_read_channels(&bt, C, bi.data());
      masked.resize(size_t(ref_count(&xt)));
      std::memset(&g, 0, sizeof g);
      g.dt = REF_F32;
      g.nd = xt.nd;
      int64_t st2 = 1;
      for (int i = xt.nd - 1; i >= 0; --i) {
        g.dims[i] = xt.dims[i];
        g.strides[i] = st2;
        st2 *= xt.dims[i];
      }
      g.data = masked.data();
      int64_t idx[REF_MAX_DIMS] = {0};
      do {
        int64_t c = idx[1];
        double ybn = sc[c] * (ref_load(&xt, ref_offset(&xt, idx)) - mean[c]) * inv[c] + bi[c];
        double grad = ref_load(&dyt2, ref_offset(&dyt2, idx)) * ref_act_grad(&ra, ybn, ref_act_fwd(&ra, ybn));
        ref_store(&g, ref_offset(&g, idx), grad);
      } while (ref_next(idx, xt.dims, xt.nd));
    }
    ref_bn_backward(&xt, &g, &dxt, &s, &dst, &dbt, eps, saved_mean ? &sm : nullptr, saved_inv ? &si : nullptr, a1, b1,
                    a2, b2);
  }));
}

// ------------------------------------------------------------------ fusion helpers
bool fusion_accepts(const FusionPlan& plan, std::string* why) {
  if (g_fusion_policy == 1) { *why = "refused by HIPDNN_ASYNC_FAKE_MIOPEN_FUSION"; return false; }
  const auto& ops = plan.ops;
  if (ops.size() < 2 || ops.size() > 3 || ops.front()->kind != OpKind::Conv || ops.back()->kind != OpKind::Activ ||
      (ops.size() == 3 && ops[1]->kind != OpKind::Bias)) {
    *why = "op sequence (conv [+ bias] + activation only)";
    return false;
  }
  int mode = ops.back()->mode;
  if (mode != miopenActivationRELU && mode != miopenActivationCLIPPEDRELU
#if NEWER_MIOPEN
      && mode != miopenActivationCLAMP
#endif
  ) {
    *why = "activation mode";
    return false;
  }
  if (g_fusion_policy == 2) return true;
  const FusionOp* conv = ops.front();
  if (conv->conv.groups != 1 || conv->conv.spatial != 2) { *why = "grouped or 3-D convolution"; return false; }
  if (!NEWER_MIOPEN && plan.input.dtype != miopenFloat) { *why = "data type (no CK kernels)"; return false; }
  return true;
}

size_t fusion_ws(const FusionPlan& plan) { return NEWER_MIOPEN ? extent(plan.input) : 0; }

miopenStatus_t fusion_execute(const char* fn, miopenHandle_t handle, miopenFusionPlanDescriptor_t pd, const void* ind,
                              const void* in, const void* outd, void* out, miopenOperatorArgs_t args, void* ws,
                              size_t ws_size, bool v2) {
  Rec r(fn);
  Handle* h = g_handles.get(handle);
  FusionPlan* plan = g_plans.get(pd);
  OpArgs* a = g_args.get(args);
  r.i("handle", h ? h->id : 0).i("plan", plan ? plan->id : 0);
  tensor_field(r, "inputDesc", ind).p("input", in);
  tensor_field(r, "outputDesc", outd).p("output", out);
  r.i("args", a ? a->id : 0);
  if (v2) r.p("workspace", ws).u("workspaceSize", ws_size);
  INJECT(r);
  TensorDesc *xi = g_tensors.get(ind), *yo = g_tensors.get(outd);
  if (!h || !plan || !a || !xi || !yo) return r.end(miopenStatusBadParm);
  if (!plan->compiled_on.count(h->id)) {
    fake_violation(fn, "fusion plan %d was not compiled for handle %d", plan->id, h->id);
    return r.end(miopenStatusNotInitialized);
  }
  size_t need = fusion_ws(*plan);
  if (v2 ? ws_size < need : need > 0) {
    fake_violation(fn, "workspace of %zu bytes; the compiled plan needs %zu", ws_size, need);
    return r.end(miopenStatusBadParm);
  }
  std::vector<FusionOp> ops;
  std::vector<OpArgVals> vals;
  for (const FusionOp* op : plan->ops) {
    auto it = a->vals.find(op->id);
    if (it == a->vals.end()) return r.end(miopenStatusBadParm);
    ops.push_back(*op);
    vals.push_back(it->second);
  }
  ConvProb p;
  p.dir = FWD;
  p.x = *xi;
  p.w = ops[0].tensor;
  p.y = *yo;
  p.c = ops[0].conv;
  bool packed;
  miopenStatus_t st = check_prob(p, &packed);
  if (st != miopenStatusSuccess) return r.end(st);
  if (!same_dims(*xi, plan->input)) return r.end(miopenStatusBadParm);
  if (!mem_ok(fn, "input", in, extent(*xi)) || !mem_ok(fn, "output", out, extent(*yo)) ||
      !mem_ok(fn, "w", vals[0].ptr, extent(p.w)) ||
      (ops.size() == 3 && !mem_ok(fn, "bias", vals[1].ptr, extent(ops[1].tensor))) ||
      (ws_size && !mem_ok(fn, "workspace", ws, ws_size)))
    return r.end(miopenStatusBadParm);
  ref_act ra;
  if (!act_ref(ops.back().mode, vals.back().a, vals.back().b, &ra)) return r.end(miopenStatusNotImplemented);
  return r.end(launch(h, fn, [=] {
    scribble(ws, need);
    run_conv(p, in, vals[0].ptr, out);
    ref_tensor yt = rt(p.y, out);
    if (ops.size() == 3) {
      ref_tensor bt = rt(ops[1].tensor, vals[1].ptr);
      ref_op_tensor(REF_OP_ADD, &yt, 1.0, &bt, 1.0, &yt, 0.0);
    }
    ref_activation_fwd(&ra, &yt, &yt, 1.0, 0.0);
  }));
}

const char* status_name(miopenStatus_t s) {
  switch (s) {
    case miopenStatusSuccess: return "miopenStatusSuccess";
    case miopenStatusNotInitialized: return "miopenStatusNotInitialized";
    case miopenStatusInvalidValue: return "miopenStatusInvalidValue";
    case miopenStatusBadParm: return "miopenStatusBadParm";
    case miopenStatusAllocFailed: return "miopenStatusAllocFailed";
    case miopenStatusInternalError: return "miopenStatusInternalError";
    case miopenStatusNotImplemented: return "miopenStatusNotImplemented";
    case miopenStatusUnknownError: return "miopenStatusUnknownError";
    case miopenStatusUnsupportedOp: return "miopenStatusUnsupportedOp";
    case miopenStatusGpuOperationsSkipped: return "miopenStatusGpuOperationsSkipped";
    case miopenStatusVersionMismatch: return "miopenStatusVersionMismatch";
  }
  return "Unknown miopenStatus_t";
}

}  // namespace

// ====================================================================== handle
miopenStatus_t miopenGetVersion(size_t* major, size_t* minor, size_t* patch) {
  Rec r("miopenGetVersion");
  INJECT(r);
  if (!major || !minor || !patch) return r.end(miopenStatusBadParm);
  *major = MIOPEN_VERSION_MAJOR;
  *minor = MIOPEN_VERSION_MINOR;
  *patch = MIOPEN_VERSION_PATCH;
  r.u("major", *major).u("minor", *minor).u("patch", *patch);
  return r.end(miopenStatusSuccess);
}

const char* miopenGetErrorString(miopenStatus_t error) { return status_name(error); }

static miopenStatus_t create_handle(Rec& r, miopenHandle_t* handle, hipStream_t stream) {
  INJECT(r);
  if (!handle) return r.end(miopenStatusBadParm);
  if (stream && !fake_stream_get(static_cast<void*>(stream), r.fn)) return r.end(miopenStatusBadParm);
  auto h = std::make_unique<Handle>();
  h->stream = stream;
  Handle* raw = g_handles.add(std::move(h));
  fake_handle_register(raw, FAKE_KIND_DNN_HANDLE);
  *handle = reinterpret_cast<miopenHandle_t>(raw);
  r.i("handle", raw->id);
  return r.end(miopenStatusSuccess);
}

miopenStatus_t miopenCreate(miopenHandle_t* handle) {
  Rec r("miopenCreate");
  return create_handle(r, handle, nullptr);
}

miopenStatus_t miopenCreateWithStream(miopenHandle_t* handle, miopenAcceleratorQueue_t stream) {
  Rec r("miopenCreateWithStream");
  r.i("stream", fake_stream_id(stream ? fake_stream_get(static_cast<void*>(stream), "miopenCreateWithStream") : nullptr));
  return create_handle(r, handle, stream);
}

miopenStatus_t miopenDestroy(miopenHandle_t handle) {
  Rec r("miopenDestroy");
  Handle* h = g_handles.get(handle);
  r.i("handle", h ? h->id : 0);
  INJECT(r);
  if (!h) {
    fake_violation(r.fn, "%p is not a live MIOpen handle", static_cast<void*>(handle));
    return r.end(miopenStatusBadParm);
  }
  fake_handle_unregister(h);
  g_handles.remove(handle);
  return r.end(miopenStatusSuccess);
}

miopenStatus_t miopenSetStream(miopenHandle_t handle, miopenAcceleratorQueue_t streamID) {
  Rec r("miopenSetStream");
  Handle* h = g_handles.get(handle);
  fake_stream* s = streamID ? fake_stream_get(static_cast<void*>(streamID), r.fn) : nullptr;
  r.i("handle", h ? h->id : 0).i("stream", fake_stream_id(s));
  INJECT(r);
  if (!h || (streamID && !s)) return r.end(miopenStatusBadParm);
  h->stream = streamID;
  return r.end(miopenStatusSuccess);
}

miopenStatus_t miopenGetStream(miopenHandle_t handle, miopenAcceleratorQueue_t* streamID) {
  Rec r("miopenGetStream");
  Handle* h = g_handles.get(handle);
  r.i("handle", h ? h->id : 0);
  INJECT(r);
  if (!h || !streamID) return r.end(miopenStatusBadParm);
  *streamID = h->stream;
  return r.end(miopenStatusSuccess);
}

#if NEWER_MIOPEN
miopenStatus_t miopenSetTuningPolicy(miopenHandle_t handle, miopenTuningPolicy_t newValue) {
  Rec r("miopenSetTuningPolicy");
  Handle* h = g_handles.get(handle);
  r.i("handle", h ? h->id : 0).i("policy", newValue);
  INJECT(r);
  if (!h || newValue < miopenTuningPolicyNone || newValue > miopenTuningPolicyDbClean) return r.end(miopenStatusBadParm);
  h->policy = newValue;
  return r.end(miopenStatusSuccess);
}

miopenStatus_t miopenGetTuningPolicy(miopenHandle_t handle, miopenTuningPolicy_t* value) {
  Rec r("miopenGetTuningPolicy");
  Handle* h = g_handles.get(handle);
  r.i("handle", h ? h->id : 0);
  INJECT(r);
  if (!h || !value) return r.end(miopenStatusBadParm);
  *value = static_cast<miopenTuningPolicy_t>(h->policy);
  r.i("policy", h->policy);
  return r.end(miopenStatusSuccess);
}
#endif

// ====================================================================== tensors
miopenStatus_t miopenCreateTensorDescriptor(miopenTensorDescriptor_t* tensorDesc) {
  Rec r("miopenCreateTensorDescriptor");
  INJECT(r);
  if (!tensorDesc) return r.end(miopenStatusBadParm);
  TensorDesc* t = g_tensors.add(std::make_unique<TensorDesc>());
  *tensorDesc = reinterpret_cast<miopenTensorDescriptor_t>(t);
  r.i("id", t->id);
  return r.end(miopenStatusSuccess);
}

miopenStatus_t miopenSetTensorDescriptor(miopenTensorDescriptor_t tensorDesc, miopenDataType_t dataType, int nbDims,
                                         const int* dimsA, const int* stridesA) {
  Rec r("miopenSetTensorDescriptor");
  TensorDesc* t = g_tensors.get(tensorDesc);
  bool shape_ok = dimsA && nbDims > 0 && nbDims <= 8;
  r.i("id", t ? t->id : 0).i("dtype", dataType).i("nbDims", nbDims);
  if (shape_ok) {
    fake_rec_ints(r.r, "dims", dimsA, nbDims);
    if (stridesA) fake_rec_ints(r.r, "strides", stridesA, nbDims);
  }
  INJECT(r);
  if (!t || !shape_ok) return r.end(miopenStatusBadParm);
  for (int i = 0; i < nbDims; ++i)
    if (dimsA[i] <= 0 || (stridesA && stridesA[i] <= 0)) return r.end(miopenStatusBadParm);
  t->dtype = dataType;
  t->nd = nbDims;
  long long s = 1;
  for (int i = nbDims - 1; i >= 0; --i) {
    t->dims[i] = dimsA[i];
    t->strides[i] = stridesA ? stridesA[i] : int(s);
    s *= dimsA[i];
  }
  t->set = true;
  return r.end(miopenStatusSuccess);
}

miopenStatus_t miopenDestroyTensorDescriptor(miopenTensorDescriptor_t tensorDesc) {
  Rec r("miopenDestroyTensorDescriptor");
  TensorDesc* t = g_tensors.get(tensorDesc);
  r.i("id", t ? t->id : 0);
  INJECT(r);
  return r.end(g_tensors.remove(tensorDesc) ? miopenStatusSuccess : miopenStatusBadParm);
}

// ====================================================================== convolution descriptors
miopenStatus_t miopenCreateConvolutionDescriptor(miopenConvolutionDescriptor_t* convDesc) {
  Rec r("miopenCreateConvolutionDescriptor");
  INJECT(r);
  if (!convDesc) return r.end(miopenStatusBadParm);
  ConvDesc* c = g_convs.add(std::make_unique<ConvDesc>());
  *convDesc = reinterpret_cast<miopenConvolutionDescriptor_t>(c);
  r.i("id", c->id);
  return r.end(miopenStatusSuccess);
}

miopenStatus_t miopenInitConvolutionNdDescriptor(miopenConvolutionDescriptor_t convDesc, int spatialDim,
                                                 const int* padA, const int* strideA, const int* dilationA,
                                                 miopenConvolutionMode_t c_mode) {
  Rec r("miopenInitConvolutionNdDescriptor");
  ConvDesc* c = g_convs.get(convDesc);
  bool n_ok = spatialDim >= 1 && spatialDim <= 3 && padA && strideA && dilationA;
  r.i("id", c ? c->id : 0).i("spatialDim", spatialDim);
  if (n_ok) {
    fake_rec_ints(r.r, "pad", padA, spatialDim);
    fake_rec_ints(r.r, "stride", strideA, spatialDim);
    fake_rec_ints(r.r, "dilation", dilationA, spatialDim);
  }
  r.i("mode", c_mode);
  INJECT(r);
  if (!c || !n_ok || spatialDim < 2) return r.end(miopenStatusBadParm);
  for (int i = 0; i < spatialDim; ++i)
    if (padA[i] < 0 || strideA[i] < 1 || dilationA[i] < 1) return r.end(miopenStatusBadParm);
  if (c_mode < miopenConvolution || c_mode > miopenDepthwise) return r.end(miopenStatusBadParm);
  c->spatial = spatialDim;
  for (int i = 0; i < spatialDim; ++i) {
    c->pad[i] = padA[i];
    c->stride[i] = strideA[i];
    c->dilation[i] = dilationA[i];
  }
  c->mode = c_mode;
  c->set = true;
  return r.end(miopenStatusSuccess);
}

miopenStatus_t miopenSetConvolutionGroupCount(miopenConvolutionDescriptor_t convDesc, int groupCount) {
  Rec r("miopenSetConvolutionGroupCount");
  ConvDesc* c = g_convs.get(convDesc);
  r.i("id", c ? c->id : 0).i("groups", groupCount);
  INJECT(r);
  if (!c || groupCount < 1) return r.end(miopenStatusBadParm);
  c->groups = groupCount;
  return r.end(miopenStatusSuccess);
}

miopenStatus_t miopenSetConvolutionAttribute(miopenConvolutionDescriptor_t convDesc, const miopenConvolutionAttrib_t attr,
                                             int value) {
  Rec r("miopenSetConvolutionAttribute");
  ConvDesc* c = g_convs.get(convDesc);
  r.i("id", c ? c->id : 0).i("attr", attr).i("value", value);
  INJECT(r);
  if (!c) return r.end(miopenStatusBadParm);
  if (attr == MIOPEN_CONVOLUTION_ATTRIB_DETERMINISTIC) {
    if (value != 0 && value != 1) return r.end(miopenStatusBadParm);
    c->deterministic = value;
    return r.end(miopenStatusSuccess);
  }
  return r.end(attr == MIOPEN_CONVOLUTION_ATTRIB_FP16_ALT_IMPL ? miopenStatusSuccess : miopenStatusBadParm);
}

miopenStatus_t miopenDestroyConvolutionDescriptor(miopenConvolutionDescriptor_t convDesc) {
  Rec r("miopenDestroyConvolutionDescriptor");
  ConvDesc* c = g_convs.get(convDesc);
  r.i("id", c ? c->id : 0);
  INJECT(r);
  return r.end(g_convs.remove(convDesc) ? miopenStatusSuccess : miopenStatusBadParm);
}

// ====================================================================== immediate mode
#define IMMEDIATE_FAMILY(DIRNAME, DIR, A, B, C)                                                                       \
  miopenStatus_t miopenConvolution##DIRNAME##GetSolutionCount(                                                        \
      miopenHandle_t handle, const miopenTensorDescriptor_t A, const miopenTensorDescriptor_t B,                      \
      const miopenConvolutionDescriptor_t convDesc, const miopenTensorDescriptor_t C, size_t* solutionCount) {        \
    return solution_count("miopenConvolution" #DIRNAME "GetSolutionCount", DIR, handle, A, B, convDesc, C,           \
                          solutionCount);                                                                             \
  }                                                                                                                   \
  miopenStatus_t miopenConvolution##DIRNAME##GetSolution(                                                             \
      miopenHandle_t handle, const miopenTensorDescriptor_t A, const miopenTensorDescriptor_t B,                      \
      const miopenConvolutionDescriptor_t convDesc, const miopenTensorDescriptor_t C, const size_t maxSolutionCount, \
      size_t* solutionCount, miopenConvSolution_t* solutions) {                                                       \
    return get_solution("miopenConvolution" #DIRNAME "GetSolution", DIR, handle, A, B, convDesc, C,                  \
                        maxSolutionCount, solutionCount, solutions);                                                 \
  }                                                                                                                   \
  miopenStatus_t miopenConvolution##DIRNAME##GetSolutionWorkspaceSize(                                                \
      miopenHandle_t handle, const miopenTensorDescriptor_t A, const miopenTensorDescriptor_t B,                      \
      const miopenConvolutionDescriptor_t convDesc, const miopenTensorDescriptor_t C, const uint64_t solution_id,    \
      size_t* workSpaceSize) {                                                                                        \
    return solution_ws("miopenConvolution" #DIRNAME "GetSolutionWorkspaceSize", DIR, handle, A, B, convDesc, C,      \
                       solution_id, workSpaceSize);                                                                   \
  }                                                                                                                   \
  miopenStatus_t miopenConvolution##DIRNAME##CompileSolution(                                                         \
      miopenHandle_t handle, const miopenTensorDescriptor_t A, const miopenTensorDescriptor_t B,                      \
      const miopenConvolutionDescriptor_t convDesc, const miopenTensorDescriptor_t C, const uint64_t solution_id) {  \
    return compile_solution("miopenConvolution" #DIRNAME "CompileSolution", DIR, handle, A, B, convDesc, C,          \
                            solution_id);                                                                             \
  }

IMMEDIATE_FAMILY(Forward, FWD, wDesc, xDesc, yDesc)
IMMEDIATE_FAMILY(BackwardData, BWD, dyDesc, wDesc, dxDesc)
IMMEDIATE_FAMILY(BackwardWeights, WRW, dyDesc, xDesc, dwDesc)

miopenStatus_t miopenConvolutionForwardImmediate(miopenHandle_t handle, const miopenTensorDescriptor_t wDesc,
                                                 const void* w, const miopenTensorDescriptor_t xDesc, const void* x,
                                                 const miopenConvolutionDescriptor_t convDesc,
                                                 const miopenTensorDescriptor_t yDesc, void* y, void* workSpace,
                                                 size_t workSpaceSize, const uint64_t solution_id) {
  return immediate("miopenConvolutionForwardImmediate", FWD, handle, wDesc, w, xDesc, x, convDesc, yDesc, y, workSpace,
                   workSpaceSize, solution_id);
}

miopenStatus_t miopenConvolutionBackwardDataImmediate(miopenHandle_t handle, const miopenTensorDescriptor_t dyDesc,
                                                      const void* dy, const miopenTensorDescriptor_t wDesc,
                                                      const void* w, const miopenConvolutionDescriptor_t convDesc,
                                                      const miopenTensorDescriptor_t dxDesc, void* dx,
                                                      void* workSpace, size_t workSpaceSize,
                                                      const uint64_t solution_id) {
  return immediate("miopenConvolutionBackwardDataImmediate", BWD, handle, dyDesc, dy, wDesc, w, convDesc, dxDesc, dx,
                   workSpace, workSpaceSize, solution_id);
}

miopenStatus_t miopenConvolutionBackwardWeightsImmediate(miopenHandle_t handle, const miopenTensorDescriptor_t dyDesc,
                                                         const void* dy, const miopenTensorDescriptor_t xDesc,
                                                         const void* x, const miopenConvolutionDescriptor_t convDesc,
                                                         const miopenTensorDescriptor_t dwDesc, void* dw,
                                                         void* workSpace, size_t workSpaceSize,
                                                         const uint64_t solution_id) {
  return immediate("miopenConvolutionBackwardWeightsImmediate", WRW, handle, dyDesc, dy, xDesc, x, convDesc, dwDesc, dw,
                   workSpace, workSpaceSize, solution_id);
}

// ====================================================================== Find 2.0
miopenStatus_t miopenCreateConvProblem(miopenProblem_t* problem, miopenConvolutionDescriptor_t operatorDesc,
                                       miopenProblemDirection_t direction) {
  Rec r("miopenCreateConvProblem");
  ConvDesc* c = g_convs.get(operatorDesc);
  r.raw("convDesc", conv_json(c)).i("direction", direction);
  INJECT(r);
  if (!problem || !c || direction < miopenProblemDirectionForward || direction > miopenProblemDirectionBackwardWeights)
    return r.end(miopenStatusBadParm);
  auto q = std::make_unique<Problem>();
  q->conv = *c;
  q->direction = direction;
  Problem* raw = g_problems.add(std::move(q));
  *problem = reinterpret_cast<miopenProblem_t>(raw);
  r.i("problem", raw->id);
  return r.end(miopenStatusSuccess);
}

miopenStatus_t miopenSetProblemTensorDescriptor(miopenProblem_t problem, miopenTensorArgumentId_t id,
                                                const miopenTensorDescriptor_t descriptor) {
  Rec r("miopenSetProblemTensorDescriptor");
  Problem* q = g_problems.get(problem);
  TensorDesc* t = g_tensors.get(descriptor);
  r.i("problem", q ? q->id : 0).i("id", id);
  tensor_field(r, "descriptor", descriptor);
  INJECT(r);
  if (!q || !t || id < miopenTensorConvolutionX || id > miopenTensorConvolutionY) return r.end(miopenStatusBadParm);
  q->tensors[id] = *t;
  return r.end(miopenStatusSuccess);
}

miopenStatus_t miopenDestroyProblem(miopenProblem_t problem) {
  Rec r("miopenDestroyProblem");
  Problem* q = g_problems.get(problem);
  r.i("problem", q ? q->id : 0);
  INJECT(r);
  return r.end(g_problems.remove(problem) ? miopenStatusSuccess : miopenStatusBadParm);
}

miopenStatus_t miopenCreateFindOptions(miopenFindOptions_t* options) {
  Rec r("miopenCreateFindOptions");
  INJECT(r);
  if (!options) return r.end(miopenStatusBadParm);
  FindOptions* o = g_options.add(std::make_unique<FindOptions>());
  *options = reinterpret_cast<miopenFindOptions_t>(o);
  r.i("options", o->id);
  return r.end(miopenStatusSuccess);
}

miopenStatus_t miopenDestroyFindOptions(miopenFindOptions_t options) {
  Rec r("miopenDestroyFindOptions");
  FindOptions* o = g_options.get(options);
  r.i("options", o ? o->id : 0);
  INJECT(r);
  return r.end(g_options.remove(options) ? miopenStatusSuccess : miopenStatusBadParm);
}

miopenStatus_t miopenSetFindOptionTuning(miopenFindOptions_t options, int value) {
  Rec r("miopenSetFindOptionTuning");
  FindOptions* o = g_options.get(options);
  r.i("options", o ? o->id : 0).i("value", value);
  INJECT(r);
  if (!o) return r.end(miopenStatusBadParm);
  o->tuning = value;
  return r.end(miopenStatusSuccess);
}

miopenStatus_t miopenSetFindOptionWorkspaceLimit(miopenFindOptions_t options, size_t value) {
  Rec r("miopenSetFindOptionWorkspaceLimit");
  FindOptions* o = g_options.get(options);
  r.i("options", o ? o->id : 0).u("value", value);
  INJECT(r);
  if (!o) return r.end(miopenStatusBadParm);
  o->ws_limit = value;
  return r.end(miopenStatusSuccess);
}

miopenStatus_t miopenSetFindOptionResultsOrder(miopenFindOptions_t options, miopenFindResultsOrder_t value) {
  Rec r("miopenSetFindOptionResultsOrder");
  FindOptions* o = g_options.get(options);
  r.i("options", o ? o->id : 0).i("value", value);
  INJECT(r);
  if (!o || (value != miopenFindResultsOrderByTime && value != miopenFindResultsOrderByWorkspaceSize))
    return r.end(miopenStatusBadParm);
  o->order = value;
  return r.end(miopenStatusSuccess);
}

miopenStatus_t miopenSetFindOptionPreallocatedWorkspace(miopenFindOptions_t options, void* buffer, size_t size) {
  Rec r("miopenSetFindOptionPreallocatedWorkspace");
  FindOptions* o = g_options.get(options);
  r.i("options", o ? o->id : 0).p("buffer", buffer).u("size", size);
  INJECT(r);
  if (!o || (size && !mem_ok(r.fn, "buffer", buffer, size))) return r.end(miopenStatusBadParm);
  o->ws = buffer;
  o->ws_size = size;
  return r.end(miopenStatusSuccess);
}

miopenStatus_t miopenSetFindOptionPreallocatedTensor(miopenFindOptions_t options, miopenTensorArgumentId_t id,
                                                     void* buffer) {
  Rec r("miopenSetFindOptionPreallocatedTensor");
  FindOptions* o = g_options.get(options);
  r.i("options", o ? o->id : 0).i("id", id).p("buffer", buffer);
  INJECT(r);
  if (!o || !buffer) return r.end(miopenStatusBadParm);
  o->tensors[id] = buffer;
  return r.end(miopenStatusSuccess);
}

miopenStatus_t miopenFindSolutions(miopenHandle_t handle, miopenProblem_t problem, miopenFindOptions_t options,
                                   miopenSolution_t* solutions, size_t* numSolutions, size_t maxSolutions) {
  Rec r("miopenFindSolutions");
  Handle* h = g_handles.get(handle);
  Problem* q = g_problems.get(problem);
  FindOptions* o = options ? g_options.get(options) : nullptr;
  r.i("handle", h ? h->id : 0).i("problem", q ? q->id : 0).i("options", o ? o->id : 0).u("max", maxSolutions);
  INJECT(r);
  FindOptions dflt;
  if (!h || !q || !solutions || !numSolutions || (options && !o)) return r.end(miopenStatusBadParm);
  if (!o) o = &dflt;
  if (!q->tensors.count(miopenTensorConvolutionX) || !q->tensors.count(miopenTensorConvolutionW) ||
      !q->tensors.count(miopenTensorConvolutionY))
    return r.end(miopenStatusBadParm);
  ConvProb p;
  p.dir = q->direction;
  p.x = q->tensors[miopenTensorConvolutionX];
  p.w = q->tensors[miopenTensorConvolutionW];
  p.y = q->tensors[miopenTensorConvolutionY];
  p.c = q->conv;
  bool packed;
  miopenStatus_t st = check_prob(p, &packed);
  if (st != miopenStatusSuccess) return r.end(st);
  std::vector<std::pair<const Solver*, float>> found;
  for (const Solver* s : solvers_for(p, o->tuning != 0)) {
    if (ws_of(*s, p) > o->ws_limit) continue;
    // without tuning the measured time is near the heuristic estimate; tuning measures the
    // tuned kernels
    found.emplace_back(s, o->tuning ? s->tuned_ms : s->heuristic_ms * 1.1f);
  }
  if (o->order == miopenFindResultsOrderByWorkspaceSize)
    std::stable_sort(found.begin(), found.end(),
                     [&](const auto& a, const auto& b) { return ws_of(*a.first, p) < ws_of(*b.first, p); });
  else
    std::stable_sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
  // Find runs the kernels on the preallocated buffers when given (overwriting them)
  auto buf = [&](int id) -> void* { return o->tensors.count(id) ? o->tensors[id] : nullptr; };
  void *bx = buf(miopenTensorConvolutionX), *bw = buf(miopenTensorConvolutionW), *by = buf(miopenTensorConvolutionY);
  if (bx && bw && by) {
    if (!mem_ok(r.fn, "X", bx, extent(p.x)) || !mem_ok(r.fn, "W", bw, extent(p.w)) || !mem_ok(r.fn, "Y", by, extent(p.y)))
      return r.end(miopenStatusBadParm);
    void* ws = o->ws;
    size_t ws_size = o->ws_size;
    for (auto& f : found) {
      size_t need = ws_of(*f.first, p);
      if (need > ws_size) continue;
      launch(h, "miopenFindSolutions", [p, bx, bw, by, ws, need] {
        scribble(ws, need);
        run_conv(p, bx, bw, by);
      });
    }
    fake_stream_synchronize(fake_stream_get(static_cast<void*>(h->stream), r.fn));
  }
  size_t k = std::min(maxSolutions, found.size());
  std::string json = "[";
  for (size_t i = 0; i < k; ++i) {
    auto s = std::make_unique<Solution>();
    s->solver = found[i].first->id;
    s->ws = ws_of(*found[i].first, p);
    s->time = found[i].second;
    Solution* raw = g_solutions.add(std::move(s));
    solutions[i] = reinterpret_cast<miopenSolution_t>(raw);
    json += std::string(i ? ", " : "") + "{\"solver\": " + std::to_string(raw->solver) + ", \"workspace\": " +
            std::to_string(raw->ws) + ", \"time\": " + std::to_string(raw->time) + "}";
  }
  *numSolutions = k;
  r.i("tuning", o->tuning).u("workspace_limit", o->ws_limit).raw("solutions", json + "]");
  return r.end(miopenStatusSuccess);
}

miopenStatus_t miopenGetSolutionWorkspaceSize(miopenSolution_t solution, size_t* workspaceSize) {
  Solution* s = g_solutions.get(solution);
  if (!s || !workspaceSize) return miopenStatusBadParm;
  *workspaceSize = s->ws;
  return miopenStatusSuccess;
}

miopenStatus_t miopenGetSolutionTime(miopenSolution_t solution, float* time) {
  Solution* s = g_solutions.get(solution);
  if (!s || !time) return miopenStatusBadParm;
  *time = s->time;
  return miopenStatusSuccess;
}

miopenStatus_t miopenGetSolutionSolverId(miopenSolution_t solution, uint64_t* solverId) {
  Solution* s = g_solutions.get(solution);
  if (!s || !solverId) return miopenStatusBadParm;
  *solverId = s->solver;
  return miopenStatusSuccess;
}

miopenStatus_t miopenGetSolverIdConvAlgorithm(uint64_t solverId, miopenConvAlgorithm_t* result) {
  const Solver* s = solver_by_id(solverId);
  if (!s || !result) return miopenStatusBadParm;
  *result = s->algo;
  return miopenStatusSuccess;
}

miopenStatus_t miopenDestroySolution(miopenSolution_t solution) {
  Rec r("miopenDestroySolution");
  Solution* s = g_solutions.get(solution);
  r.i("solution", s ? s->id : 0);
  INJECT(r);
  return r.end(g_solutions.remove(solution) ? miopenStatusSuccess : miopenStatusBadParm);
}

// ====================================================================== activation, bias, op tensor
miopenStatus_t miopenCreateActivationDescriptor(miopenActivationDescriptor_t* activDesc) {
  Rec r("miopenCreateActivationDescriptor");
  INJECT(r);
  if (!activDesc) return r.end(miopenStatusBadParm);
  ActivDesc* a = g_activs.add(std::make_unique<ActivDesc>());
  *activDesc = reinterpret_cast<miopenActivationDescriptor_t>(a);
  r.i("id", a->id);
  return r.end(miopenStatusSuccess);
}

miopenStatus_t miopenSetActivationDescriptor(const miopenActivationDescriptor_t activDesc, miopenActivationMode_t mode,
                                             double activAlpha, double activBeta, double activGamma) {
  Rec r("miopenSetActivationDescriptor");
  ActivDesc* a = g_activs.get(activDesc);
  r.i("id", a ? a->id : 0).i("mode", mode).d("alpha", activAlpha).d("beta", activBeta).d("gamma", activGamma);
  INJECT(r);
  if (!a || !known_activation(mode)) return r.end(miopenStatusBadParm);
  a->mode = mode;
  a->a = activAlpha;
  a->b = activBeta;
  a->g = activGamma;
  a->set = true;
  return r.end(miopenStatusSuccess);
}

miopenStatus_t miopenDestroyActivationDescriptor(miopenActivationDescriptor_t activDesc) {
  Rec r("miopenDestroyActivationDescriptor");
  ActivDesc* a = g_activs.get(activDesc);
  r.i("id", a ? a->id : 0);
  INJECT(r);
  return r.end(g_activs.remove(activDesc) ? miopenStatusSuccess : miopenStatusBadParm);
}

miopenStatus_t miopenActivationForward(miopenHandle_t handle, const miopenActivationDescriptor_t activDesc,
                                       const void* alpha, const miopenTensorDescriptor_t xDesc, const void* x,
                                       const void* beta, const miopenTensorDescriptor_t yDesc, void* y) {
  Rec r("miopenActivationForward");
  Handle* h = g_handles.get(handle);
  ActivDesc* a = g_activs.get(activDesc);
  r.i("handle", h ? h->id : 0).raw("activDesc", activ_json(a)).d("alpha", host_scalar(alpha, NAN));
  tensor_field(r, "xDesc", xDesc).p("x", x).d("beta", host_scalar(beta, NAN));
  tensor_field(r, "yDesc", yDesc).p("y", y);
  INJECT(r);
  TensorDesc *xd = g_tensors.get(xDesc), *yd = g_tensors.get(yDesc);
  ref_act ra;
  if (!h || !a || !a->set || !xd || !yd || !same_dims(*xd, *yd) || xd->dtype != yd->dtype || !alpha || !beta)
    return r.end(miopenStatusBadParm);
  if (!act_ref(a->mode, a->a, a->b, &ra)) return r.end(miopenStatusNotImplemented);
  if (!mem_ok(r.fn, "x", x, extent(*xd)) || !mem_ok(r.fn, "y", y, extent(*yd))) return r.end(miopenStatusBadParm);
  TensorDesc xc = *xd, yc = *yd;
  double al = host_scalar(alpha, 1), be = host_scalar(beta, 0);
  return r.end(launch(h, r.fn, [=] {
    ref_tensor xt = rt(xc, x), yt = rt(yc, y);
    ref_activation_fwd(&ra, &xt, &yt, al, be);
  }));
}

miopenStatus_t miopenActivationBackward(miopenHandle_t handle, const miopenActivationDescriptor_t activDesc,
                                        const void* alpha, const miopenTensorDescriptor_t yDesc, const void* y,
                                        const miopenTensorDescriptor_t dyDesc, const void* dy,
                                        const miopenTensorDescriptor_t xDesc, const void* x, const void* beta,
                                        const miopenTensorDescriptor_t dxDesc, void* dx) {
  Rec r("miopenActivationBackward");
  Handle* h = g_handles.get(handle);
  ActivDesc* a = g_activs.get(activDesc);
  r.i("handle", h ? h->id : 0).raw("activDesc", activ_json(a)).d("alpha", host_scalar(alpha, NAN));
  tensor_field(r, "yDesc", yDesc).p("y", y);
  tensor_field(r, "dyDesc", dyDesc).p("dy", dy);
  tensor_field(r, "xDesc", xDesc).p("x", x).d("beta", host_scalar(beta, NAN));
  tensor_field(r, "dxDesc", dxDesc).p("dx", dx);
  INJECT(r);
  TensorDesc *yd = g_tensors.get(yDesc), *dyd = g_tensors.get(dyDesc), *xd = g_tensors.get(xDesc),
             *dxd = g_tensors.get(dxDesc);
  ref_act ra;
  if (!h || !a || !a->set || !yd || !dyd || !xd || !dxd || !same_dims(*xd, *dxd) || !same_dims(*xd, *dyd) ||
      !same_dims(*xd, *yd) || !alpha || !beta)
    return r.end(miopenStatusBadParm);
  if (!act_ref(a->mode, a->a, a->b, &ra)) return r.end(miopenStatusNotImplemented);
  if (!mem_ok(r.fn, "x", x, extent(*xd)) || !mem_ok(r.fn, "y", y, extent(*yd)) || !mem_ok(r.fn, "dy", dy, extent(*dyd)) ||
      !mem_ok(r.fn, "dx", dx, extent(*dxd)))
    return r.end(miopenStatusBadParm);
  TensorDesc xc = *xd, yc = *yd, dyc = *dyd, dxc = *dxd;
  double al = host_scalar(alpha, 1), be = host_scalar(beta, 0);
  return r.end(launch(h, r.fn, [=] {
    ref_tensor xt = rt(xc, x), yt = rt(yc, y), dyt = rt(dyc, dy), dxt = rt(dxc, dx);
    ref_activation_bwd(&ra, &yt, &dyt, &xt, &dxt, al, be);
  }));
}

miopenStatus_t miopenConvolutionForwardBias(miopenHandle_t handle, const void* alpha, const miopenTensorDescriptor_t bDesc,
                                            const void* b, const void* beta, const miopenTensorDescriptor_t yDesc,
                                            void* y) {
  Rec r("miopenConvolutionForwardBias");
  Handle* h = g_handles.get(handle);
  r.i("handle", h ? h->id : 0).d("alpha", host_scalar(alpha, NAN));
  tensor_field(r, "bDesc", bDesc).p("b", b).d("beta", host_scalar(beta, NAN));
  tensor_field(r, "yDesc", yDesc).p("y", y);
  INJECT(r);
  TensorDesc *bd = g_tensors.get(bDesc), *yd = g_tensors.get(yDesc);
  // miopen.h: "only supported for alpha = 1 and beta = 0"
  if (!h || !bd || !yd || bd->nd != yd->nd || bd->dtype != yd->dtype || host_scalar(alpha, 0) != 1.f ||
      host_scalar(beta, 1) != 0.f)
    return r.end(miopenStatusBadParm);
  for (int i = 0; i < bd->nd; ++i)
    if (bd->dims[i] != (i == 1 ? yd->dims[1] : 1)) return r.end(miopenStatusBadParm);
  if (!mem_ok(r.fn, "b", b, extent(*bd)) || !mem_ok(r.fn, "y", y, extent(*yd))) return r.end(miopenStatusBadParm);
  TensorDesc bc = *bd, yc = *yd;
  return r.end(launch(h, r.fn, [=] {
    ref_tensor bt = rt(bc, b), yt = rt(yc, y);
    ref_op_tensor(REF_OP_ADD, &yt, 1.0, &bt, 1.0, &yt, 0.0);   // y += b (in place)
  }));
}

miopenStatus_t miopenOpTensor(miopenHandle_t handle, miopenTensorOp_t tensorOp, const void* alpha1,
                              const miopenTensorDescriptor_t aDesc, const void* A, const void* alpha2,
                              const miopenTensorDescriptor_t bDesc, const void* B, const void* beta,
                              const miopenTensorDescriptor_t cDesc, void* C) {
  Rec r("miopenOpTensor");
  Handle* h = g_handles.get(handle);
  r.i("handle", h ? h->id : 0).i("op", tensorOp).d("alpha1", host_scalar(alpha1, NAN));
  tensor_field(r, "aDesc", aDesc).p("A", A).d("alpha2", host_scalar(alpha2, NAN));
  tensor_field(r, "bDesc", bDesc).p("B", B).d("beta", host_scalar(beta, NAN));
  tensor_field(r, "cDesc", cDesc).p("C", C);
  INJECT(r);
  TensorDesc *ad = g_tensors.get(aDesc), *bd = g_tensors.get(bDesc), *cd = g_tensors.get(cDesc);
  if (!h || !ad || !bd || !cd || !same_dims(*ad, *cd) || bd->nd != ad->nd || ad->dtype != bd->dtype ||
      ad->dtype != cd->dtype || !alpha1 || !alpha2 || !beta || tensorOp < miopenTensorOpAdd || tensorOp > miopenTensorOpMax)
    return r.end(miopenStatusBadParm);
  for (int i = 0; i < bd->nd; ++i)
    if (bd->dims[i] != 1 && bd->dims[i] != ad->dims[i]) return r.end(miopenStatusBadParm);
  if (!mem_ok(r.fn, "A", A, extent(*ad)) || !mem_ok(r.fn, "B", B, extent(*bd)) || !mem_ok(r.fn, "C", C, extent(*cd)))
    return r.end(miopenStatusBadParm);
  TensorDesc ac = *ad, bc = *bd, cc = *cd;
  double a1 = host_scalar(alpha1, 1), a2 = host_scalar(alpha2, 1), bb = host_scalar(beta, 0);
  ref_op op = tensorOp == miopenTensorOpAdd ? REF_OP_ADD : tensorOp == miopenTensorOpMul ? REF_OP_MUL
              : tensorOp == miopenTensorOpMin ? REF_OP_MIN : REF_OP_MAX;
  return r.end(launch(h, r.fn, [=] {
    ref_tensor at = rt(ac, A), bt = rt(bc, B), ct = rt(cc, C);
    ref_op_tensor(op, &at, a1, &bt, a2, &ct, bb);
  }));
}

// ====================================================================== fusion plans
miopenStatus_t miopenCreateFusionPlan(miopenFusionPlanDescriptor_t* fusePlanDesc,
                                      const miopenFusionDirection_t fuseDirection, const miopenTensorDescriptor_t inputDesc) {
  Rec r("miopenCreateFusionPlan");
  r.i("direction", fuseDirection);
  tensor_field(r, "inputDesc", inputDesc);
  INJECT(r);
  TensorDesc* t = g_tensors.get(inputDesc);
  if (!fusePlanDesc || !t || fuseDirection != miopenVerticalFusion) return r.end(miopenStatusBadParm);
  auto p = std::make_unique<FusionPlan>();
  p->input = *t;
  FusionPlan* raw = g_plans.add(std::move(p));
  *fusePlanDesc = reinterpret_cast<miopenFusionPlanDescriptor_t>(raw);
  r.i("plan", raw->id);
  return r.end(miopenStatusSuccess);
}

miopenStatus_t miopenDestroyFusionPlan(miopenFusionPlanDescriptor_t fusePlanDesc) {
  Rec r("miopenDestroyFusionPlan");
  FusionPlan* p = g_plans.get(fusePlanDesc);
  r.i("plan", p ? p->id : 0);
  INJECT(r);
  return r.end(g_plans.remove(fusePlanDesc) ? miopenStatusSuccess : miopenStatusBadParm);
}

static miopenStatus_t add_op(Rec& r, miopenFusionPlanDescriptor_t pd, miopenFusionOpDescriptor_t* out,
                             std::unique_ptr<FusionOp> op) {
  FusionPlan* p = g_plans.get(pd);
  if (!p || !out) return r.end(miopenStatusBadParm);
  FusionOp* raw = g_ops.add(std::move(op));
  p->ops.push_back(raw);
  *out = reinterpret_cast<miopenFusionOpDescriptor_t>(raw);
  r.i("op", raw->id);
  return r.end(miopenStatusSuccess);
}

miopenStatus_t miopenCreateOpConvForward(miopenFusionPlanDescriptor_t fusePlanDesc, miopenFusionOpDescriptor_t* convOp,
                                         miopenConvolutionDescriptor_t convDesc, const miopenTensorDescriptor_t wDesc) {
  Rec r("miopenCreateOpConvForward");
  FusionPlan* p = g_plans.get(fusePlanDesc);
  ConvDesc* c = g_convs.get(convDesc);
  r.i("plan", p ? p->id : 0).raw("convDesc", conv_json(c));
  tensor_field(r, "wDesc", wDesc);
  INJECT(r);
  TensorDesc* w = g_tensors.get(wDesc);
  if (!c || !w) return r.end(miopenStatusBadParm);
  auto op = std::make_unique<FusionOp>();
  op->kind = OpKind::Conv;
  op->conv = *c;
  op->tensor = *w;
  return add_op(r, fusePlanDesc, convOp, std::move(op));
}

miopenStatus_t miopenCreateOpBiasForward(miopenFusionPlanDescriptor_t fusePlanDesc, miopenFusionOpDescriptor_t* biasOp,
                                         const miopenTensorDescriptor_t bDesc) {
  Rec r("miopenCreateOpBiasForward");
  FusionPlan* p = g_plans.get(fusePlanDesc);
  r.i("plan", p ? p->id : 0);
  tensor_field(r, "bDesc", bDesc);
  INJECT(r);
  TensorDesc* b = g_tensors.get(bDesc);
  if (!b) return r.end(miopenStatusBadParm);
  auto op = std::make_unique<FusionOp>();
  op->kind = OpKind::Bias;
  op->tensor = *b;
  return add_op(r, fusePlanDesc, biasOp, std::move(op));
}

miopenStatus_t miopenCreateOpActivationForward(miopenFusionPlanDescriptor_t fusePlanDesc,
                                               miopenFusionOpDescriptor_t* activFwdOp, miopenActivationMode_t mode) {
  Rec r("miopenCreateOpActivationForward");
  FusionPlan* p = g_plans.get(fusePlanDesc);
  r.i("plan", p ? p->id : 0).i("mode", mode);
  INJECT(r);
  if (!known_activation(mode)) return r.end(miopenStatusBadParm);
  auto op = std::make_unique<FusionOp>();
  op->kind = OpKind::Activ;
  op->mode = mode;
  return add_op(r, fusePlanDesc, activFwdOp, std::move(op));
}

miopenStatus_t miopenCompileFusionPlan(miopenHandle_t handle, miopenFusionPlanDescriptor_t fusePlanDesc) {
  Rec r("miopenCompileFusionPlan");
  Handle* h = g_handles.get(handle);
  FusionPlan* p = g_plans.get(fusePlanDesc);
  r.i("handle", h ? h->id : 0).i("plan", p ? p->id : 0);
  INJECT(r);
  if (!h || !p) return r.end(miopenStatusBadParm);
  std::string why;
  if (!fusion_accepts(*p, &why)) {
    r.s("refused", why);
    return r.end(miopenStatusUnsupportedOp);
  }
  p->compiled_on.insert(h->id);
  return r.end(miopenStatusSuccess);
}

miopenStatus_t miopenFusionPlanGetWorkSpaceSize(miopenHandle_t handle, miopenFusionPlanDescriptor_t fusePlanDesc,
                                                size_t* workSpaceSize, miopenConvFwdAlgorithm_t algo) {
  Rec r("miopenFusionPlanGetWorkSpaceSize");
  Handle* h = g_handles.get(handle);
  FusionPlan* p = g_plans.get(fusePlanDesc);
  r.i("handle", h ? h->id : 0).i("plan", p ? p->id : 0).i("algo", algo);
  INJECT(r);
  if (!h || !p || !workSpaceSize || !p->compiled_on.count(h->id)) return r.end(miopenStatusBadParm);
  *workSpaceSize = fusion_ws(*p);
  r.u("workspace", *workSpaceSize);
  return r.end(miopenStatusSuccess);
}

miopenStatus_t miopenFusionPlanConvolutionGetAlgo(miopenFusionPlanDescriptor_t fusePlanDesc, const int requestAlgoCount,
                                                  int* returnedAlgoCount, miopenConvFwdAlgorithm_t* returnedAlgos) {
  Rec r("miopenFusionPlanConvolutionGetAlgo");
  FusionPlan* p = g_plans.get(fusePlanDesc);
  r.i("plan", p ? p->id : 0).i("requestAlgoCount", requestAlgoCount);
  INJECT(r);
  if (!p || !returnedAlgoCount || !returnedAlgos || requestAlgoCount < 1) return r.end(miopenStatusBadParm);
  returnedAlgos[0] = miopenConvolutionFwdAlgoDirect;
  *returnedAlgoCount = 1;
  return r.end(miopenStatusSuccess);
}

miopenStatus_t miopenCreateOperatorArgs(miopenOperatorArgs_t* args) {
  Rec r("miopenCreateOperatorArgs");
  INJECT(r);
  if (!args) return r.end(miopenStatusBadParm);
  OpArgs* a = g_args.add(std::make_unique<OpArgs>());
  *args = reinterpret_cast<miopenOperatorArgs_t>(a);
  r.i("args", a->id);
  return r.end(miopenStatusSuccess);
}

miopenStatus_t miopenDestroyOperatorArgs(miopenOperatorArgs_t args) {
  Rec r("miopenDestroyOperatorArgs");
  OpArgs* a = g_args.get(args);
  r.i("args", a ? a->id : 0);
  INJECT(r);
  return r.end(g_args.remove(args) ? miopenStatusSuccess : miopenStatusBadParm);
}

static miopenStatus_t set_args(const char* name, miopenOperatorArgs_t args, const miopenFusionOpDescriptor_t op,
                               OpKind kind, const void* alpha, const void* beta, const void* ptr, double a, double b,
                               double g) {
  Rec r(name);
  OpArgs* oa = g_args.get(args);
  FusionOp* fo = g_ops.get(op);
  r.i("args", oa ? oa->id : 0).i("op", fo ? fo->id : 0).d("alpha", host_scalar(alpha, NAN))
      .d("beta", host_scalar(beta, NAN));
  if (kind != OpKind::Activ) r.p(kind == OpKind::Conv ? "w" : "bias", ptr);
  else r.d("activAlpha", a).d("activBeta", b).d("activGamma", g);
  INJECT(r);
  if (!oa || !fo || fo->kind != kind || !alpha || !beta) return r.end(miopenStatusBadParm);
  OpArgVals v;
  v.ptr = ptr;
  v.a = a;
  v.b = b;
  v.g = g;
  oa->vals[fo->id] = v;
  return r.end(miopenStatusSuccess);
}

miopenStatus_t miopenSetOpArgsConvForward(miopenOperatorArgs_t args, const miopenFusionOpDescriptor_t convOp,
                                          const void* alpha, const void* beta, const void* w) {
  return set_args("miopenSetOpArgsConvForward", args, convOp, OpKind::Conv, alpha, beta, w, 0, 0, 0);
}

miopenStatus_t miopenSetOpArgsBiasForward(miopenOperatorArgs_t args, const miopenFusionOpDescriptor_t biasOp,
                                          const void* alpha, const void* beta, const void* bias) {
  return set_args("miopenSetOpArgsBiasForward", args, biasOp, OpKind::Bias, alpha, beta, bias, 0, 0, 0);
}

miopenStatus_t miopenSetOpArgsActivForward(miopenOperatorArgs_t args, const miopenFusionOpDescriptor_t activFwdOp,
                                           const void* alpha, const void* beta, double activAlpha, double activBeta,
                                           double activGamma) {
  return set_args("miopenSetOpArgsActivForward", args, activFwdOp, OpKind::Activ, alpha, beta, nullptr, activAlpha,
                  activBeta, activGamma);
}

miopenStatus_t miopenExecuteFusionPlan(const miopenHandle_t handle, const miopenFusionPlanDescriptor_t fusePlanDesc,
                                       const miopenTensorDescriptor_t inputDesc, const void* input,
                                       const miopenTensorDescriptor_t outputDesc, void* output,
                                       miopenOperatorArgs_t args) {
  return fusion_execute("miopenExecuteFusionPlan", handle, fusePlanDesc, inputDesc, input, outputDesc, output, args,
                        nullptr, 0, false);
}

#if NEWER_MIOPEN
miopenStatus_t miopenExecuteFusionPlan_v2(const miopenHandle_t handle, const miopenFusionPlanDescriptor_t fusePlanDesc,
                                          const miopenTensorDescriptor_t inputDesc, const void* input,
                                          const miopenTensorDescriptor_t outputDesc, void* output,
                                          miopenOperatorArgs_t args, void* workspace, size_t workspaceSize) {
  return fusion_execute("miopenExecuteFusionPlan_v2", handle, fusePlanDesc, inputDesc, input, outputDesc, output, args,
                        workspace, workspaceSize, true);
}
#endif

// ====================================================================== batchnorm
miopenStatus_t miopenBatchNormalizationForwardInference_V2(
    miopenHandle_t handle, miopenBatchNormMode_t bn_mode, void* alpha, void* beta, const miopenTensorDescriptor_t xDesc,
    const void* x, const miopenTensorDescriptor_t yDesc, void* y, const miopenTensorDescriptor_t scaleDesc,
    const miopenTensorDescriptor_t biasDesc, const miopenTensorDescriptor_t estMeanDesc,
    const miopenTensorDescriptor_t estVarianceDesc, void* bnScale, void* bnBias, void* estimatedMean,
    void* estimatedVariance, double epsilon) {
  return bn_inference("miopenBatchNormalizationForwardInference_V2", handle, bn_mode, alpha, beta, xDesc, x, yDesc, y,
                      scaleDesc, biasDesc, estMeanDesc, estVarianceDesc, bnScale, bnBias, estimatedMean,
                      estimatedVariance, epsilon, nullptr);
}

miopenStatus_t miopenBatchNormalizationForwardTraining_V2(
    miopenHandle_t handle, miopenBatchNormMode_t bn_mode, void* alpha, void* beta, const miopenTensorDescriptor_t xDesc,
    const void* x, const miopenTensorDescriptor_t yDesc, void* y, const miopenTensorDescriptor_t scaleDesc,
    const miopenTensorDescriptor_t biasVarDesc, const miopenTensorDescriptor_t savedMeanDesc,
    const miopenTensorDescriptor_t savedVarDesc, void* bnScale, void* bnBias, double expAvgFactor,
    void* resultRunningMean, void* resultRunningVariance, double epsilon, void* resultSaveMean,
    void* resultSaveInvVariance) {
  return bn_training("miopenBatchNormalizationForwardTraining_V2", handle, bn_mode, alpha, beta, xDesc, x, yDesc, y,
                     scaleDesc, biasVarDesc, savedMeanDesc, savedVarDesc, bnScale, bnBias, expAvgFactor,
                     resultRunningMean, resultRunningVariance, epsilon, resultSaveMean, resultSaveInvVariance, nullptr);
}

miopenStatus_t miopenBatchNormalizationBackward_V2(
    miopenHandle_t handle, miopenBatchNormMode_t bn_mode, const void* alphaDataDiff, const void* betaDataDiff,
    const void* alphaParamDiff, const void* betaParamDiff, const miopenTensorDescriptor_t xDesc, const void* x,
    const miopenTensorDescriptor_t dyDesc, const void* dy, const miopenTensorDescriptor_t dxDesc, void* dx,
    const miopenTensorDescriptor_t scaleDesc, const miopenTensorDescriptor_t biasDesc,
    const miopenTensorDescriptor_t savedMeanDesc, const miopenTensorDescriptor_t savedVarDesc, const void* bnScale,
    void* resultBnScaleDiff, void* resultBnBiasDiff, double epsilon, const void* savedMean,
    const void* savedInvVariance) {
  return bn_backward("miopenBatchNormalizationBackward_V2", handle, bn_mode, alphaDataDiff, betaDataDiff,
                     alphaParamDiff, betaParamDiff, xDesc, x, dyDesc, dy, dxDesc, dx, scaleDesc, biasDesc,
                     savedMeanDesc, savedVarDesc, bnScale, nullptr, resultBnScaleDiff, resultBnBiasDiff, epsilon,
                     savedMean, savedInvVariance, nullptr, false);
}

#if NEWER_MIOPEN
miopenStatus_t miopenBatchNormForwardTrainingActivation(
    miopenHandle_t handle, miopenBatchNormMode_t bn_mode, void* alpha, void* beta, const miopenTensorDescriptor_t xDesc,
    const void* x, const miopenTensorDescriptor_t yDesc, void* y, const miopenTensorDescriptor_t scaleDesc,
    const miopenTensorDescriptor_t biasVarDesc, const miopenTensorDescriptor_t savedMeanDesc,
    const miopenTensorDescriptor_t savedVarDesc, void* bnScale, void* bnBias, double expAvgFactor,
    void* resultRunningMean, void* resultRunningVariance, double epsilon, void* resultSaveMean,
    void* resultSaveInvVariance, const miopenActivationDescriptor_t activDesc) {
  if (!activDesc) return miopenStatusBadParm;
  return bn_training("miopenBatchNormForwardTrainingActivation", handle, bn_mode, alpha, beta, xDesc, x, yDesc, y,
                     scaleDesc, biasVarDesc, savedMeanDesc, savedVarDesc, bnScale, bnBias, expAvgFactor,
                     resultRunningMean, resultRunningVariance, epsilon, resultSaveMean, resultSaveInvVariance,
                     activDesc);
}

miopenStatus_t miopenBatchNormForwardInferenceActivation(
    miopenHandle_t handle, miopenBatchNormMode_t bn_mode, void* alpha, void* beta, const miopenTensorDescriptor_t xDesc,
    const void* x, const miopenTensorDescriptor_t yDesc, void* y, const miopenTensorDescriptor_t scaleDesc,
    const miopenTensorDescriptor_t biasDesc, const miopenTensorDescriptor_t estMeanDesc,
    const miopenTensorDescriptor_t estVarianceDesc, void* bnScale, void* bnBias, void* estimatedMean,
    void* estimatedVariance, double epsilon, const miopenActivationDescriptor_t activDesc) {
  if (!activDesc) return miopenStatusBadParm;
  return bn_inference("miopenBatchNormForwardInferenceActivation", handle, bn_mode, alpha, beta, xDesc, x, yDesc, y,
                      scaleDesc, biasDesc, estMeanDesc, estVarianceDesc, bnScale, bnBias, estimatedMean,
                      estimatedVariance, epsilon, activDesc);
}

miopenStatus_t miopenBatchNormBackwardActivation(
    miopenHandle_t handle, miopenBatchNormMode_t bn_mode, const void* alphaDataDiff, const void* betaDataDiff,
    const void* alphaParamDiff, const void* betaParamDiff, const miopenTensorDescriptor_t xDesc, const void* x,
    const miopenTensorDescriptor_t dyDesc, const void* dy, const miopenTensorDescriptor_t dxDesc, void* dx,
    const miopenTensorDescriptor_t scaleDesc, const miopenTensorDescriptor_t biasDesc,
    const miopenTensorDescriptor_t savedMeanDesc, const miopenTensorDescriptor_t savedVarianceDesc,
    const void* bnScale, const void* bnBias, void* resultBnScaleDiff, void* resultBnBiasDiff, double epsilon,
    const void* savedMean, const void* savedInvVariance, const miopenActivationDescriptor_t activDesc) {
  return bn_backward("miopenBatchNormBackwardActivation", handle, bn_mode, alphaDataDiff, betaDataDiff, alphaParamDiff,
                     betaParamDiff, xDesc, x, dyDesc, dy, dxDesc, dx, scaleDesc, biasDesc, savedMeanDesc,
                     savedVarianceDesc, bnScale, bnBias, resultBnScaleDiff, resultBnBiasDiff, epsilon, savedMean,
                     savedInvVariance, activDesc, true);
}
#endif

// ====================================================================== fake-only exports (no real MIOpen symbol)
extern "C" FAKE_API void fake_miopen_set_fusion_policy(int policy) { g_fusion_policy = policy; }
extern "C" FAKE_API int fake_miopen_live_objects(void) {
  return int(g_handles.size() + g_tensors.size() + g_convs.size() + g_activs.size() + g_plans.size() + g_args.size() +
             g_problems.size() + g_options.size() + g_solutions.size());
}
extern "C" FAKE_API int fake_miopen_header_version(void) {
  return MIOPEN_VERSION_MAJOR * 10000 + MIOPEN_VERSION_MINOR * 100 + MIOPEN_VERSION_PATCH;
}
