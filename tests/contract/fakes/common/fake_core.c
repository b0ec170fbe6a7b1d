/* The vendor-neutral core of the fake GPU libraries: see fake_core.h. */
#define _GNU_SOURCE
#include "fake_core.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* ================================================================== JSON log */
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static fake_buf log_buf;           /* records separated by ",\n" */
static long long log_seq;
static long long log_records;
static char *log_snapshot;
static int n_violations;

void fake_buf_printf(fake_buf *b, const char *fmt, ...) {
    va_list ap;
    for (;;) {
        size_t room = b->cap - b->n;
        va_start(ap, fmt);
        int k = vsnprintf(b->s ? b->s + b->n : NULL, b->s ? room : 0, fmt, ap);
        va_end(ap);
        if (k < 0) return;
        if (b->s && (size_t)k < room) { b->n += (size_t)k; return; }
        size_t cap = b->cap ? b->cap : 256;
        while (cap - b->n <= (size_t)k) cap *= 2;
        char *s = (char *)realloc(b->s, cap);
        if (!s) abort();
        b->s = s;
        b->cap = cap;
    }
}

void fake_buf_free(fake_buf *b) {
    free(b->s);
    b->s = NULL;
    b->n = b->cap = 0;
}

struct fake_rec { fake_buf b; };

static long thread_id(void) { return (long)syscall(SYS_gettid); }

static void json_string(fake_buf *b, const char *s) {
    fake_buf_printf(b, "\"");
    for (; s && *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fake_buf_printf(b, "\\%c", c);
        else if (c < 0x20) fake_buf_printf(b, "\\u%04x", c);
        else fake_buf_printf(b, "%c", c);
    }
    fake_buf_printf(b, "\"");
}

fake_rec *fake_rec_begin(const char *kind, const char *fn) {
    fake_rec *r = (fake_rec *)calloc(1, sizeof *r);
    if (!r) abort();
    fake_buf_printf(&r->b, "{\"rec\": ");
    json_string(&r->b, kind);
    fake_buf_printf(&r->b, ", \"fn\": ");
    json_string(&r->b, fn);
    fake_buf_printf(&r->b, ", \"thread\": %ld", thread_id());
    return r;
}

static void key(fake_rec *r, const char *k) {
    fake_buf_printf(&r->b, ", ");
    json_string(&r->b, k);
    fake_buf_printf(&r->b, ": ");
}

void fake_rec_int(fake_rec *r, const char *k, long long v) { key(r, k); fake_buf_printf(&r->b, "%lld", v); }
void fake_rec_uint(fake_rec *r, const char *k, unsigned long long v) { key(r, k); fake_buf_printf(&r->b, "%llu", v); }
void fake_rec_str(fake_rec *r, const char *k, const char *v) {
    key(r, k);
    if (v) json_string(&r->b, v); else fake_buf_printf(&r->b, "null");
}
void fake_rec_ptr(fake_rec *r, const char *k, const void *p) {
    key(r, k);
    fake_buf_printf(&r->b, "%llu", (unsigned long long)(uintptr_t)p);
}
void fake_rec_double(fake_rec *r, const char *k, double v) {
    key(r, k);
    if (v != v) fake_buf_printf(&r->b, "\"nan\"");
    else if (v > 1.7e308 || v < -1.7e308) fake_buf_printf(&r->b, v > 0 ? "\"inf\"" : "\"-inf\"");
    else fake_buf_printf(&r->b, "%.17g", v);
}
void fake_rec_ints(fake_rec *r, const char *k, const int *v, int n) {
    key(r, k);
    fake_buf_printf(&r->b, "[");
    for (int i = 0; v && i < n; i++) fake_buf_printf(&r->b, i ? ", %d" : "%d", v[i]);
    fake_buf_printf(&r->b, "]");
}
void fake_rec_i64s(fake_rec *r, const char *k, const int64_t *v, int n) {
    key(r, k);
    fake_buf_printf(&r->b, "[");
    for (int i = 0; v && i < n; i++) fake_buf_printf(&r->b, i ? ", %lld" : "%lld", (long long)v[i]);
    fake_buf_printf(&r->b, "]");
}
void fake_rec_raw(fake_rec *r, const char *k, const char *json) {
    key(r, k);
    fake_buf_printf(&r->b, "%s", json && *json ? json : "null");
}

int fake_rec_end(fake_rec *r, int status) {
    pthread_mutex_lock(&log_mu);
    fake_buf_printf(&r->b, ", \"status\": %d, \"seq\": %lld}", status, log_seq++);
    fake_buf_printf(&log_buf, "%s%s", log_records ? ",\n" : "", r->b.s);
    log_records++;
    pthread_mutex_unlock(&log_mu);
    fake_buf_free(&r->b);
    free(r);
    return status;
}

const char *fake_log_json(void) {
    pthread_mutex_lock(&log_mu);
    free(log_snapshot);
    size_t n = log_buf.n;
    log_snapshot = (char *)malloc(n + 3);
    if (!log_snapshot) abort();
    log_snapshot[0] = '[';
    if (n) memcpy(log_snapshot + 1, log_buf.s, n);
    log_snapshot[n + 1] = ']';
    log_snapshot[n + 2] = 0;
    pthread_mutex_unlock(&log_mu);
    return log_snapshot;
}

void fake_log_clear(void) {
    pthread_mutex_lock(&log_mu);
    log_buf.n = 0;
    log_records = 0;
    n_violations = 0;
    pthread_mutex_unlock(&log_mu);
}

long long fake_log_count(void) {
    pthread_mutex_lock(&log_mu);
    long long n = log_records;
    pthread_mutex_unlock(&log_mu);
    return n;
}

void fake_log_mark(const char *label) {
    fake_rec *r = fake_rec_begin("mark", "<mark>");
    fake_rec_str(r, "label", label);
    fake_rec_end(r, 0);
}

void fake_violation(const char *fn, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fake_rec *r = fake_rec_begin("violation", fn);
    fake_rec_str(r, "what", msg);
    pthread_mutex_lock(&log_mu);
    n_violations++;
    pthread_mutex_unlock(&log_mu);
    fake_rec_end(r, -1);
}

int fake_violations(void) {
    pthread_mutex_lock(&log_mu);
    int n = n_violations;
    pthread_mutex_unlock(&log_mu);
    return n;
}

/* ================================================================== injection */
typedef struct { char fn[128]; int skip; int count; int status; } injection;
static pthread_mutex_t inj_mu = PTHREAD_MUTEX_INITIALIZER;
static injection injections[64];
static int n_injections;

void fake_inject(const char *fn, int nth, int status, int count) {
    pthread_mutex_lock(&inj_mu);
    if (n_injections < 64) {
        injection *in = &injections[n_injections++];
        snprintf(in->fn, sizeof in->fn, "%s", fn);
        in->skip = nth > 1 ? nth - 1 : 0;
        in->count = count > 0 ? count : 1;
        in->status = status;
    }
    pthread_mutex_unlock(&inj_mu);
}

void fake_inject_clear(void) {
    pthread_mutex_lock(&inj_mu);
    n_injections = 0;
    pthread_mutex_unlock(&inj_mu);
}

int fake_injected(const char *fn) {
    int status = 0;
    pthread_mutex_lock(&inj_mu);
    for (int i = 0; i < n_injections; i++) {
        injection *in = &injections[i];
        if (in->count <= 0 || strcmp(in->fn, fn) != 0) continue;
        if (in->skip > 0) { in->skip--; continue; }
        in->count--;
        status = in->status;
        break;
    }
    pthread_mutex_unlock(&inj_mu);
    if (status) {
        fake_rec *r = fake_rec_begin("injected", fn);
        fake_rec_end(r, status);
    }
    return status;
}

/* ================================================================== handles */
typedef struct { const void *h; int kind; int id; } handle_entry;
static pthread_mutex_t h_mu = PTHREAD_MUTEX_INITIALIZER;
static handle_entry *handles;
static size_t n_handles, cap_handles;
static int next_handle_id = 1;

int fake_handle_register(void *h, int kind) {
    pthread_mutex_lock(&h_mu);
    if (n_handles == cap_handles) {
        cap_handles = cap_handles ? 2 * cap_handles : 256;
        handles = (handle_entry *)realloc(handles, cap_handles * sizeof *handles);
        if (!handles) abort();
    }
    int id = next_handle_id++;
    handles[n_handles].h = h;
    handles[n_handles].kind = kind;
    handles[n_handles].id = id;
    n_handles++;
    pthread_mutex_unlock(&h_mu);
    return id;
}

static handle_entry *find_handle(const void *h) {
    for (size_t i = n_handles; i-- > 0;)
        if (handles[i].h == h) return &handles[i];
    return NULL;
}

void fake_handle_unregister(void *h) {
    pthread_mutex_lock(&h_mu);
    handle_entry *e = find_handle(h);
    if (e) *e = handles[--n_handles];
    pthread_mutex_unlock(&h_mu);
}

int fake_handle_kind(const void *h) {
    pthread_mutex_lock(&h_mu);
    handle_entry *e = h ? find_handle(h) : NULL;
    int k = e ? e->kind : FAKE_KIND_NONE;
    pthread_mutex_unlock(&h_mu);
    return k;
}

int fake_handle_id(const void *h) {
    pthread_mutex_lock(&h_mu);
    handle_entry *e = h ? find_handle(h) : NULL;
    int id = e ? e->id : 0;
    pthread_mutex_unlock(&h_mu);
    return id;
}

/* ================================================================== memory */
typedef struct { char *base; size_t size; int kind; int live; int owned; int device; } mem_entry;

/* ================================================================== devices */
static __thread int cur_device;
void fake_set_current_device(int device) { cur_device = device; }
int fake_current_device(void) { return cur_device; }
static pthread_mutex_t m_mu = PTHREAD_MUTEX_INITIALIZER;
static mem_entry *mems;
static size_t n_mems, cap_mems;
static size_t mem_in_use;
#define FAKE_MEM_TOTAL ((size_t)8 << 30)   /* what the fake device reports: 8 GiB */

static void add_mem(char *p, size_t n, int kind, int owned) {
    if (n_mems == cap_mems) {
        cap_mems = cap_mems ? 2 * cap_mems : 1024;
        mems = (mem_entry *)realloc(mems, cap_mems * sizeof *mems);
        if (!mems) abort();
    }
    mems[n_mems].base = p;
    mems[n_mems].size = n;
    mems[n_mems].kind = kind;
    mems[n_mems].live = 1;
    mems[n_mems].owned = owned;
    mems[n_mems].device = kind == FAKE_MEM_HOST ? -1 : cur_device;
    n_mems++;
}

void *fake_mem_alloc(size_t nbytes, int kind) {
    /* 256-byte aligned as cudaMalloc guarantees; one extra byte so that 0-byte
     * allocations still get a unique address */
    void *p = NULL;
    if (posix_memalign(&p, 256, nbytes + 1) != 0) return NULL;
    memset(p, 0xA5, nbytes + 1);   /* uninitialised device memory is garbage, not zeros */
    pthread_mutex_lock(&m_mu);
    add_mem((char *)p, nbytes, kind, 1);
    mem_in_use += nbytes;
    pthread_mutex_unlock(&m_mu);
    return p;
}

int fake_mem_register(void *p, size_t nbytes, int kind) {
    pthread_mutex_lock(&m_mu);
    add_mem((char *)p, nbytes, kind, 0);
    pthread_mutex_unlock(&m_mu);
    return 0;
}

static mem_entry *find_live(const void *p) {
    const char *c = (const char *)p;
    for (size_t i = n_mems; i-- > 0;) {
        mem_entry *m = &mems[i];
        if (m->live && c >= m->base && (c < m->base + m->size || c == m->base)) return m;
    }
    return NULL;
}

int fake_mem_free(void *p, int kind) {
    pthread_mutex_lock(&m_mu);
    mem_entry *m = find_live(p);
    if (!m || m->base != (char *)p || (kind && m->kind != kind)) {
        pthread_mutex_unlock(&m_mu);
        return -1;
    }
    m->live = 0;
    if (m->owned) {
        memset(m->base, 0xFF, m->size);   /* poisoned; quarantined, never reused */
        mem_in_use -= m->size;
    }
    pthread_mutex_unlock(&m_mu);
    return 0;
}

int fake_mem_unregister(void *p) { return fake_mem_free(p, 0); }

int fake_mem_find(const void *p, void **base, size_t *size, int *kind) {
    pthread_mutex_lock(&m_mu);
    mem_entry *m = find_live(p);
    if (m) {
        if (base) *base = m->base;
        if (size) *size = m->size;
        if (kind) *kind = m->kind;
    }
    pthread_mutex_unlock(&m_mu);
    return m != NULL;
}

int fake_mem_device(const void *p) {
    pthread_mutex_lock(&m_mu);
    mem_entry *m = find_live(p);
    int d = m ? m->device : -1;
    pthread_mutex_unlock(&m_mu);
    return d;
}

int fake_mem_check(const void *p, size_t nbytes, const char *fn, const char *what) {
    int dev = fake_mem_device(p);
    if (dev >= 0 && dev != cur_device) {
        fake_violation(fn, "%s: %p is memory of device %d; the calling thread's current "
                       "device is %d", what, p, dev, cur_device);
        return 0;
    }
    void *base;
    size_t size;
    int kind;
    if (!fake_mem_find(p, &base, &size, &kind)) {
        fake_violation(fn, "%s: %p is not device memory (host, freed or never allocated)",
                       what, p);
        return 0;
    }
    if (kind == FAKE_MEM_HOST) {
        fake_violation(fn, "%s: %p is pinned host memory, not device memory", what, p);
        return 0;
    }
    size_t off = (size_t)((const char *)p - (const char *)base);
    if (off + nbytes > size) {
        fake_violation(fn, "%s: %zu bytes at offset %zu overrun the %zu-byte allocation %p",
                       what, nbytes, off, size, base);
        return 0;
    }
    return 1;
}

size_t fake_mem_in_use(void) {
    pthread_mutex_lock(&m_mu);
    size_t n = mem_in_use;
    pthread_mutex_unlock(&m_mu);
    return n;
}

size_t fake_mem_total(void) { return FAKE_MEM_TOTAL; }

/* ================================================================== streams */
static int delay_us = -1;

void fake_set_delay_us(int us) { delay_us = us < 0 ? 0 : us; }

int fake_delay_us(void) {
    if (delay_us < 0) {
        const char *e = getenv("HIPDNN_ASYNC_FAKE_DELAY_US");
        delay_us = e && *e ? atoi(e) : 2000;
    }
    return delay_us;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

typedef struct work {
    struct work *next;
    const char *label;
    fake_work_fn fn;
    void *arg;
    void (*free_arg)(void *);
} work;

typedef struct fake_nodes fake_nodes;

struct fake_stream {
    int device;            /* current when created; the worker runs with it current */
    fake_nodes *capture;   /* non-NULL while capturing: enqueued work goes here */
    int capture_invalid;
    int id;
    unsigned flags;
    int priority;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    work *head, *tail;
    unsigned long long enqueued, completed;
    int running;           /* worker thread started */
    int closing;
    pthread_t thread;
};

struct fake_event {
    int device;
    int id;
    unsigned flags;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    unsigned long long recorded, done;
    double time_ms;
    int ever;
};

static pthread_mutex_t s_mu = PTHREAD_MUTEX_INITIALIZER;
static fake_stream *all_streams[4096];
static int n_streams;
static fake_stream *default_stream;

static void do_record(void *p);

static void *worker_main(void *arg) {
    fake_stream *s = (fake_stream *)arg;
    cur_device = s->device;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->head && !s->closing) pthread_cond_wait(&s->cv, &s->mu);
        if (!s->head && s->closing) break;
        work *w = s->head;
        pthread_mutex_unlock(&s->mu);
        int d = fake_delay_us();
        if (d > 0) usleep((useconds_t)d);
        /* An event record marks its event inside the stream's count of done items (under
         * its lock), as CUDA does: once the event is done a query of the stream sees the
         * record done too, and a stream synchronize sees the event done. */
        int record = w->fn == do_record;
        if (w->fn && !record) w->fn(w->arg);
        if (w->label) {
            fake_rec *r = fake_rec_begin("exec", w->label);
            fake_rec_int(r, "stream", s->id);
            fake_rec_end(r, 0);
        }
        pthread_mutex_lock(&s->mu);
        s->head = w->next;
        if (!s->head) s->tail = NULL;
        s->completed++;
        if (record) w->fn(w->arg);
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        if (w->free_arg) w->free_arg(w->arg);
        free(w);
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

fake_stream *fake_stream_new(unsigned flags, int priority) {
    fake_stream *s = (fake_stream *)calloc(1, sizeof *s);
    if (!s) abort();
    s->device = cur_device;
    s->flags = flags;
    s->priority = priority;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    if (pthread_create(&s->thread, NULL, worker_main, s) != 0) abort();
    s->running = 1;
    s->id = fake_handle_register(s, FAKE_KIND_STREAM);
    pthread_mutex_lock(&s_mu);
    if (n_streams < 4096) all_streams[n_streams++] = s;
    pthread_mutex_unlock(&s_mu);
    return s;
}

static fake_stream *get_default(void) {
    pthread_mutex_lock(&s_mu);
    fake_stream *s = default_stream;
    pthread_mutex_unlock(&s_mu);
    if (s) return s;
    s = fake_stream_new(0, 0);
    pthread_mutex_lock(&s_mu);
    if (!default_stream) default_stream = s;
    s = default_stream;
    pthread_mutex_unlock(&s_mu);
    return s;
}

fake_stream *fake_stream_get(void *handle, const char *fn) {
    if (!handle) return get_default();
    if (fake_handle_kind(handle) != FAKE_KIND_STREAM) {
        fake_violation(fn, "stream handle %p is not a live stream", handle);
        return NULL;
    }
    return (fake_stream *)handle;
}

int fake_stream_id(fake_stream *s) { return s ? s->id : 0; }
int fake_stream_device(fake_stream *s) { return s && s != default_stream ? s->device : -1; }
unsigned fake_stream_flags(fake_stream *s) { return s ? s->flags : 0; }
int fake_stream_priority(fake_stream *s) { return s ? s->priority : 0; }

static void nodes_append(fake_nodes *n, work *w);

void fake_stream_enqueue(fake_stream *s, const char *label, fake_work_fn fn, void *arg,
                         void (*free_arg)(void *)) {
    work *w = (work *)calloc(1, sizeof *w);
    if (!w) abort();
    w->label = label;
    w->fn = fn;
    w->arg = arg;
    w->free_arg = free_arg;
    pthread_mutex_lock(&s->mu);
    if (s->capture) {                  /* captured: a node of the graph, not run now */
        nodes_append(s->capture, w);
        pthread_mutex_unlock(&s->mu);
        return;
    }
    if (s->tail) s->tail->next = w; else s->head = w;
    s->tail = w;
    s->enqueued++;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

void fake_stream_synchronize(fake_stream *s) {
    pthread_mutex_lock(&s->mu);
    unsigned long long target = s->enqueued;
    while (s->completed < target) pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
}

int fake_stream_idle(fake_stream *s) {
    pthread_mutex_lock(&s->mu);
    int idle = s->completed == s->enqueued;
    pthread_mutex_unlock(&s->mu);
    return idle;
}

typedef struct { fake_event *e; unsigned long long target; } wait_arg;

static void do_wait(void *p) {
    wait_arg *a = (wait_arg *)p;
    pthread_mutex_lock(&a->e->mu);
    while (a->e->done < a->target) pthread_cond_wait(&a->e->cv, &a->e->mu);
    pthread_mutex_unlock(&a->e->mu);
}

void fake_stream_wait_event(fake_stream *s, fake_event *e) {
    wait_arg *a = (wait_arg *)malloc(sizeof *a);
    if (!a) abort();
    pthread_mutex_lock(&e->mu);
    a->e = e;
    a->target = e->recorded;   /* the event's last record at the time of the call */
    pthread_mutex_unlock(&e->mu);
    fake_stream_enqueue(s, NULL, do_wait, a, free);
}

void fake_stream_destroy(fake_stream *s) {
    /* the handle dies now; the worker drains what was enqueued and exits (detached) */
    fake_handle_unregister(s);
    pthread_mutex_lock(&s_mu);
    for (int i = 0; i < n_streams; i++)
        if (all_streams[i] == s) { all_streams[i] = all_streams[--n_streams]; break; }
    pthread_mutex_unlock(&s_mu);
    pthread_mutex_lock(&s->mu);
    s->closing = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_detach(s->thread);   /* the struct is leaked on purpose: late waits stay valid */
}

void fake_device_synchronize(void) {
    fake_stream *list[4096];
    pthread_mutex_lock(&s_mu);
    int n = n_streams;
    memcpy(list, all_streams, (size_t)n * sizeof *list);
    pthread_mutex_unlock(&s_mu);
    for (int i = 0; i < n; i++) fake_stream_synchronize(list[i]);
}

/* ================================================================== capture, graphs */
struct fake_nodes {
    pthread_mutex_t mu;
    int refs;
    int n;
    work *head, *tail;
};

struct fake_graph {
    int id;
    int exec;
    pthread_mutex_t mu;
    fake_nodes *nodes;
};

static fake_nodes *nodes_new(void) {
    fake_nodes *n = (fake_nodes *)calloc(1, sizeof *n);
    if (!n) abort();
    pthread_mutex_init(&n->mu, NULL);
    n->refs = 1;
    return n;
}

static void nodes_append(fake_nodes *n, work *w) {
    if (n->tail) n->tail->next = w; else n->head = w;
    n->tail = w;
    n->n++;
}

static fake_nodes *nodes_ref(fake_nodes *n) {
    pthread_mutex_lock(&n->mu);
    n->refs++;
    pthread_mutex_unlock(&n->mu);
    return n;
}

static void nodes_unref(void *p) {
    fake_nodes *n = (fake_nodes *)p;
    pthread_mutex_lock(&n->mu);
    int left = --n->refs;
    pthread_mutex_unlock(&n->mu);
    if (left) return;
    for (work *w = n->head; w;) {
        work *next = w->next;
        if (w->free_arg) w->free_arg(w->arg);
        free(w);
        w = next;
    }
    free(n);
}

static void run_nodes(void *p) {
    fake_nodes *n = (fake_nodes *)p;
    for (work *w = n->head; w; w = w->next) {
        if (w->fn) w->fn(w->arg);
        if (w->label) {
            fake_rec *r = fake_rec_begin("exec", w->label);
            fake_rec_int(r, "graph_node", 1);
            fake_rec_end(r, 0);
        }
    }
}

int fake_stream_begin_capture(fake_stream *s) {
    pthread_mutex_lock(&s->mu);
    int busy = s->capture != NULL;
    if (!busy) {
        s->capture = nodes_new();
        s->capture_invalid = 0;
    }
    pthread_mutex_unlock(&s->mu);
    return busy ? -1 : 0;
}

int fake_stream_capturing(fake_stream *s) {
    pthread_mutex_lock(&s->mu);
    int st = !s->capture ? 0 : s->capture_invalid ? 2 : 1;
    pthread_mutex_unlock(&s->mu);
    return st;
}

void fake_stream_invalidate_capture(fake_stream *s) {
    pthread_mutex_lock(&s->mu);
    if (s->capture) s->capture_invalid = 1;
    pthread_mutex_unlock(&s->mu);
}

static fake_graph *graph_new(fake_nodes *nodes, int exec) {
    fake_graph *g = (fake_graph *)calloc(1, sizeof *g);
    if (!g) abort();
    pthread_mutex_init(&g->mu, NULL);
    g->nodes = nodes;
    g->exec = exec;
    g->id = fake_handle_register(g, exec ? FAKE_KIND_GRAPH_EXEC : FAKE_KIND_GRAPH);
    return g;
}

fake_graph *fake_stream_end_capture(fake_stream *s, int *invalidated) {
    pthread_mutex_lock(&s->mu);
    fake_nodes *n = s->capture;
    int bad = s->capture_invalid;
    s->capture = NULL;
    s->capture_invalid = 0;
    pthread_mutex_unlock(&s->mu);
    if (invalidated) *invalidated = n && bad;
    if (!n) return NULL;
    if (bad) { nodes_unref(n); return NULL; }
    return graph_new(n, 0);
}

fake_graph *fake_graph_get(void *handle, int kind, const char *fn) {
    if (fake_handle_kind(handle) != kind) {
        fake_violation(fn, "%s handle %p is not a live one", kind == FAKE_KIND_GRAPH ?
                       "graph" : "executable graph", handle);
        return NULL;
    }
    return (fake_graph *)handle;
}

fake_graph *fake_graph_instantiate(fake_graph *g) {
    pthread_mutex_lock(&g->mu);
    fake_nodes *n = nodes_ref(g->nodes);
    pthread_mutex_unlock(&g->mu);
    return graph_new(n, 1);
}

int fake_graph_update(fake_graph *exec, fake_graph *g) {
    pthread_mutex_lock(&g->mu);
    fake_nodes *fresh = nodes_ref(g->nodes);
    pthread_mutex_unlock(&g->mu);
    pthread_mutex_lock(&exec->mu);
    fake_nodes *old = exec->nodes;
    int same = old->n == fresh->n;
    for (work *a = old->head, *b = fresh->head; same && a && b; a = a->next, b = b->next)
        same = a->fn == b->fn;
    if (same) exec->nodes = fresh;
    pthread_mutex_unlock(&exec->mu);
    nodes_unref(same ? old : fresh);
    return same;
}

void fake_graph_launch(fake_graph *exec, fake_stream *s) {
    pthread_mutex_lock(&exec->mu);
    fake_nodes *n = nodes_ref(exec->nodes);
    pthread_mutex_unlock(&exec->mu);
    fake_stream_enqueue(s, "graph launch", run_nodes, n, nodes_unref);
}

int fake_graph_id(fake_graph *g) { return g ? g->id : 0; }

int fake_graph_nodes(fake_graph *g) {
    pthread_mutex_lock(&g->mu);
    int n = g->nodes->n;
    pthread_mutex_unlock(&g->mu);
    return n;
}

void fake_graph_destroy(fake_graph *g) {
    /* launches in flight hold their own reference to the nodes */
    fake_handle_unregister(g);
    pthread_mutex_lock(&g->mu);
    fake_nodes *n = g->nodes;
    g->nodes = NULL;
    pthread_mutex_unlock(&g->mu);
    if (n) nodes_unref(n);
    free(g);
}

/* ================================================================== events */
fake_event *fake_event_new(unsigned flags) {
    fake_event *e = (fake_event *)calloc(1, sizeof *e);
    if (!e) abort();
    e->device = cur_device;
    e->flags = flags;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    e->id = fake_handle_register(e, FAKE_KIND_EVENT);
    return e;
}

fake_event *fake_event_get(void *handle, const char *fn) {
    if (fake_handle_kind(handle) != FAKE_KIND_EVENT) {
        fake_violation(fn, "event handle %p is not a live event", handle);
        return NULL;
    }
    return (fake_event *)handle;
}

int fake_event_id(fake_event *e) { return e ? e->id : 0; }
int fake_event_device(fake_event *e) { return e ? e->device : -1; }
unsigned fake_event_flags(fake_event *e) { return e ? e->flags : 0; }

typedef struct { fake_event *e; unsigned long long gen; } record_arg;

static void do_record(void *p) {
    record_arg *a = (record_arg *)p;
    pthread_mutex_lock(&a->e->mu);
    if (a->gen > a->e->done) a->e->done = a->gen;
    a->e->time_ms = now_ms();
    pthread_cond_broadcast(&a->e->cv);
    pthread_mutex_unlock(&a->e->mu);
}

void fake_event_record(fake_event *e, fake_stream *s) {
    record_arg *a = (record_arg *)malloc(sizeof *a);
    if (!a) abort();
    pthread_mutex_lock(&e->mu);
    a->e = e;
    a->gen = ++e->recorded;
    e->ever = 1;
    pthread_mutex_unlock(&e->mu);
    fake_stream_enqueue(s, NULL, do_record, a, free);
}

int fake_event_done(fake_event *e) {
    pthread_mutex_lock(&e->mu);
    int d = e->done >= e->recorded;
    pthread_mutex_unlock(&e->mu);
    return d;
}

void fake_event_synchronize(fake_event *e) {
    pthread_mutex_lock(&e->mu);
    unsigned long long target = e->recorded;
    while (e->done < target) pthread_cond_wait(&e->cv, &e->mu);
    pthread_mutex_unlock(&e->mu);
}

int fake_event_recorded(fake_event *e) {
    pthread_mutex_lock(&e->mu);
    int r = e->ever;
    pthread_mutex_unlock(&e->mu);
    return r;
}

double fake_event_time_ms(fake_event *e) {
    pthread_mutex_lock(&e->mu);
    double t = e->time_ms;
    pthread_mutex_unlock(&e->mu);
    return t;
}

void fake_event_destroy(fake_event *e) {
    /* pending records still complete (the struct is leaked on purpose) */
    fake_handle_unregister(e);
}
