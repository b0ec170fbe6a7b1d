/* A tiny fake GPU runtime for the unit tests of runtime._gpu (not the contract fakes of
 * tests/contract/, which are compiled against the vendors' headers).
 *
 * Compile with -DPREFIX=cuda or -DPREFIX=hip; the other knobs:
 *   DEVICES      number of devices (default 2)
 *   VERSION      what RuntimeGetVersion reports (default 13000)
 *   MEM_DEVICE   the memory-type value PointerGetAttributes reports for our allocations
 *   WITH_POOLS   export MallocAsync/FreeAsync/DeviceGetDefaultMemPool/MemPoolSetAttribute
 *   PROPS_NAME   the GetDeviceProperties symbol suffix (e.g. _v2, R0600, or empty)
 *   ARCH_OFFSET  where the architecture name goes in the properties struct (HIP)
 * DeviceGetAttribute answers attr * 10 + device, so a test sees which attribute number the
 * binding asked for. fake_next_status(s) makes the next StreamDestroy return s.
 */
#include <stdlib.h>
#include <string.h>
#include <stdio.h>

#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)
#define F(name) CAT(PREFIX, name)
#define STR2(a) #a
#define STR(a) STR2(a)

#ifndef DEVICES
#define DEVICES 2
#endif
#ifndef VERSION
#define VERSION 13000
#endif
#ifndef MEM_DEVICE
#define MEM_DEVICE 2
#endif
#ifndef ARCH_OFFSET
#define ARCH_OFFSET -1
#endif
#ifndef PROPS_NAME
#define PROPS_NAME
#endif

static int current = 0;
static int next_status = 0;
static int queries = 0;
static int last_memcpy_kind = -1;
static unsigned last_flags = 0;
#define MAX_ALLOCS 64
static void* allocs[MAX_ALLOCS];
static size_t sizes[MAX_ALLOCS];

int fake_next_status(int s) { next_status = s; return 0; }
int fake_last_memcpy_kind(void) { return last_memcpy_kind; }
unsigned fake_last_flags(void) { return last_flags; }

static void remember(void* p, size_t n) {
    for (int i = 0; i < MAX_ALLOCS; i++) if (!allocs[i]) { allocs[i] = p; sizes[i] = n; return; }
}
static int owned(const void* p) {
    for (int i = 0; i < MAX_ALLOCS; i++)
        if (allocs[i] && (const char*)p >= (char*)allocs[i] && (const char*)p < (char*)allocs[i] + sizes[i])
            return 1;
    return 0;
}
static void forget(void* p) {
    for (int i = 0; i < MAX_ALLOCS; i++) if (allocs[i] == p) { allocs[i] = NULL; return; }
}

int F(GetDeviceCount)(int* n) { *n = DEVICES; return 0; }
int F(SetDevice)(int d) { if (d < 0 || d >= DEVICES) return 101; current = d; return 0; }
int F(GetDevice)(int* d) { *d = current; return 0; }
const char* F(GetErrorString)(int s) { (void)s; return "fake error string"; }
const char* F(GetErrorName)(int s) {
    static char buf[64];
    snprintf(buf, sizeof buf, "fakeError%d", s);
    return buf;
}
int F(RuntimeGetVersion)(int* v) { *v = VERSION; return 0; }
int F(DriverGetVersion)(int* v) { *v = VERSION; return 0; }
int F(DeviceGetAttribute)(int* v, int attr, int dev) { *v = attr * 10 + dev; return 0; }
int CAT(F(GetDeviceProperties), PROPS_NAME)(void* props, int dev) {
    snprintf((char*)props, 256, "Fake %s GPU %d", STR(PREFIX), dev);
    if (ARCH_OFFSET >= 0) strcpy((char*)props + ARCH_OFFSET, "gfx942:sramecc+:xnack-");
    return 0;
}
int F(MemGetInfo)(size_t* free_b, size_t* total_b) {
    *free_b = 1000 + current; *total_b = 4096 * (size_t)(current + 1); return 0;
}
int F(DeviceGetStreamPriorityRange)(int* least, int* greatest) { *least = 0; *greatest = -5; return 0; }
int F(StreamCreateWithFlags)(void** s, unsigned flags) { last_flags = flags; *s = malloc(1); return 0; }
int F(StreamCreateWithPriority)(void** s, unsigned flags, int prio) {
    last_flags = flags + 1000u * (unsigned)(-prio); *s = malloc(1); return 0;
}
int F(StreamDestroy)(void* s) { int st = next_status; next_status = 0; if (!st) free(s); return st; }
int F(StreamSynchronize)(void* s) { (void)s; return 0; }
int F(StreamQuery)(void* s) { (void)s; return 0; }
int F(StreamWaitEvent)(void* s, void* e, unsigned f) { (void)s; (void)e; return f ? 1 : 0; }
int F(EventCreateWithFlags)(void** e, unsigned flags) { last_flags = flags; *e = malloc(1); return 0; }
int F(EventRecord)(void* e, void* s) { (void)e; (void)s; queries = 0; return 0; }
int F(EventSynchronize)(void* e) { (void)e; return 0; }
int F(EventQuery)(void* e) { (void)e; return queries++ == 0 ? 600 : 0; }   /* NotReady once */
int F(EventDestroy)(void* e) { free(e); return 0; }
int F(Malloc)(void** p, size_t n) { *p = malloc(n); remember(*p, n); return *p ? 0 : 2; }
int F(Free)(void* p) { forget(p); free(p); return 0; }
#ifdef WITH_POOLS
int F(MallocAsync)(void** p, size_t n, void* s) { (void)s; return F(Malloc)(p, n); }
int F(FreeAsync)(void* p, void* s) { (void)s; return F(Free)(p); }
int F(DeviceGetDefaultMemPool)(void** pool, int dev) { *pool = (void*)(long)(0x100 + dev); return 0; }
int F(MemPoolSetAttribute)(void* pool, int attr, void* value) { (void)pool; (void)value; return attr == 4 ? 0 : 1; }
#endif
int F(Memcpy)(void* d, const void* s, size_t n, int kind) { last_memcpy_kind = kind; memcpy(d, s, n); return 0; }
int F(MemcpyAsync)(void* d, const void* s, size_t n, int kind, void* st) {
    (void)st; last_memcpy_kind = kind; memcpy(d, s, n); return 0;
}
int F(MemsetAsync)(void* d, int v, size_t n, void* st) { (void)st; memset(d, v, n); return 0; }

struct attrs { int type; int device; void* devicePointer; void* hostPointer; };
int F(PointerGetAttributes)(struct attrs* a, const void* p) {
    if (!owned(p)) return 1;
    a->type = MEM_DEVICE; a->device = current; a->devicePointer = (void*)p; a->hostPointer = NULL;
    return 0;
}
