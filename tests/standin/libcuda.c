/* A stand-in libcuda for CPU tests of custream's own bookkeeping (pools, the current
 * stream, the default-stream rule, the primary-context retains, green contexts): one device
 * (STANDIN_DEVICES=2 makes two), streams and events as heap cells, counters the tests read
 * back with ctypes. It runs no GPU work and checks nothing a real driver checks but what is
 * said below; what needs a real driver is in tests/gpu/.
 *
 * Green contexts (CUDA 12.4) as the driver documents them: a device has 132 SMs, split in
 * groups of a multiple of 8 (at least 8), disjoint, the rest in a remainder; an output of a
 * split cannot be split again; cuGreenCtxCreate needs CU_GREEN_CTX_DEFAULT_STREAM and retains
 * the primary context until cuGreenCtxDestroy; cuGreenCtxStreamCreate needs
 * CU_STREAM_NON_BLOCKING; a stream made while a context converted from a green one is current
 * belongs to that green context (cuStreamGetGreenCtx). What a real driver leaves undefined is
 * counted instead: calls on a destroyed green context (standin_green_misuse), and streams a
 * green context's destroy left detached (standin_detached_streams).
 *
 * IPC events as CUDA documents them: CU_EVENT_INTERPROCESS needs CU_EVENT_DISABLE_TIMING; only
 * such an event has a handle (cuIpcGetEventHandle); opening one (cuIpcOpenEventHandle) makes
 * an event of this process that stands for the exporter's (standin_imported_events counts
 * them), and its destroy closes only that. A handle is the exporter's pid and the event's
 * number; STANDIN_IMPORTED_PENDING=1 leaves the work recorded on an imported event never done
 * (an exporter that exits before its work completes). Device UUIDs (cuDeviceGetUuid_v2) are per physical device: STANDIN_UUID_BASE=n
 * plays a process whose device 0 is the machine's device n (CUDA_VISIBLE_DEVICES).
 *
 * A stream's settings (cuStreamSetAttribute, cuStreamGetAttribute, cuStreamCopyAttributes)
 * are kept per stream and checked as the driver checks them; stream callbacks
 * (cuStreamAddCallback) run as CUDA documents them, after a fault too (both at the end). */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef int CUresult;
typedef int CUdevice;
struct green;
typedef struct ctx { unsigned long long id; int device; struct green *green; } *CUcontext;
/* A stream's settings (cuStreamSetAttribute): CUstreamAttrValue's members, as CUDA 12 lays
 * them out in a union of 64 bytes. */
typedef struct { void *base; size_t bytes; float hit_ratio; int hit, miss; } Window;
typedef union { unsigned char pad[64]; Window window; int sync; int domain; } AttrValue;
struct attrs { int sync; Window window; int domain; };
typedef struct stream { struct ctx *ctx; struct green *green; struct stream *next; unsigned long long id; struct attrs attrs; } *CUstream;
typedef struct event { unsigned flags; int imported; unsigned serial; unsigned pid; } *CUevent;

enum {
    OK = 0, INVALID_VALUE = 1, INVALID_DEVICE = 101, INVALID_CONTEXT = 201, NOT_READY = 600,
    NOT_SUPPORTED = 801, INVALID_HANDLE = 400, INVALID_RESOURCE_TYPE = 914, INVALID_RESOURCE_CONFIGURATION = 915,
    STREAM_DETACHED = 917, ILLEGAL_ADDRESS = 700,
};
enum { SMS = 132, SM_GRANULE = 8, RESOURCE_SM = 1, GREEN_DEFAULT_STREAM = 1, NON_BLOCKING = 1, ATTR_SMS = 16,
       ATTR_MAX_WINDOW = 109 };
/* CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE: 128 MiB, as an H100's (nearly);
 * standin_max_window(0) plays a device without a window (before compute capability 8.0). */
static int max_window = 128 << 20;
void standin_max_window(int n) { max_window = n; }

static struct ctx primary[2] = {{1, 0, NULL}, {1001, 1, NULL}};
/* Counters bumped from any thread at once (a free-threaded interpreter runs custream's calls
 * in parallel): atomic, as a driver's own bookkeeping is. */
static int primary_retains, live_streams, live_events, pushes;
#define BUMP(n, by) __atomic_add_fetch(&(n), (by), __ATOMIC_RELAXED)
#define READ(n) __atomic_load_n(&(n), __ATOMIC_RELAXED)
static __thread CUcontext stack[16];
static __thread int depth;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static int devices(void) {
    const char *n = getenv("STANDIN_DEVICES");
    return n && atoi(n) == 2 ? 2 : 1;
}

int standin_primary_retains(void) { return READ(primary_retains); }
int standin_live_streams(void) { return READ(live_streams); }
int standin_live_events(void) { return READ(live_events); }
int standin_pushes(void) { return READ(pushes); }
/* Like cuDevicePrimaryCtxReset in another library: the context gets a new id. */
void standin_reset_primary(void) { primary[0].id++; }

CUresult cuInit(unsigned f) { (void)f; return OK; }
/* STANDIN_DRIVER_VERSION=12030 plays a driver from before green contexts (the entry points
 * are still exported: custream refuses by version). */
CUresult cuDriverGetVersion(int *v) {
    const char *env = getenv("STANDIN_DRIVER_VERSION");
    *v = env ? atoi(env) : 13000;
    return OK;
}
CUresult cuGetErrorName(CUresult e, const char **s) {
    switch (e) {
    case INVALID_CONTEXT: *s = "CUDA_ERROR_INVALID_CONTEXT"; break;
    case INVALID_VALUE: *s = "CUDA_ERROR_INVALID_VALUE"; break;
    case INVALID_RESOURCE_CONFIGURATION: *s = "CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION"; break;
    case STREAM_DETACHED: *s = "CUDA_ERROR_STREAM_DETACHED"; break;
    case ILLEGAL_ADDRESS: *s = "CUDA_ERROR_ILLEGAL_ADDRESS"; break;
    case INVALID_HANDLE: *s = "CUDA_ERROR_INVALID_HANDLE"; break;
    default: *s = "CUDA_ERROR_STANDIN"; break;
    }
    return OK;
}
CUresult cuGetErrorString(CUresult e, const char **s) { (void)e; *s = "stand-in driver"; return OK; }
CUresult cuDeviceGetCount(int *n) { *n = devices(); return OK; }
CUresult cuDeviceGet(CUdevice *d, int i) { *d = i; return i >= 0 && i < devices() ? OK : INVALID_DEVICE; }
CUresult cuDeviceGetName(char *s, int n, CUdevice d) { (void)d; strncpy(s, "stand-in", (size_t)n); return OK; }
CUresult cuDeviceTotalMem_v2(size_t *b, CUdevice d) { (void)d; *b = 0; return OK; }
CUresult cuDeviceGetAttribute(int *v, int a, CUdevice d) {
    (void)d;
    *v = a == ATTR_SMS ? SMS : a == ATTR_MAX_WINDOW ? max_window : 9;
    return OK;
}
CUresult cuCtxGetCurrent(CUcontext *c) { *c = depth ? stack[depth - 1] : NULL; return OK; }
CUresult cuCtxGetDevice(CUdevice *d) { *d = depth ? stack[depth - 1]->device : 0; return depth ? OK : INVALID_CONTEXT; }
CUresult cuCtxGetId(CUcontext c, unsigned long long *id) { *id = c->id; return OK; }
CUresult cuCtxPushCurrent_v2(CUcontext c) { stack[depth++] = c; BUMP(pushes, 1); return OK; }
CUresult cuCtxPopCurrent_v2(CUcontext *c) { *c = depth ? stack[--depth] : NULL; return OK; }
CUresult cuCtxGetStreamPriorityRange(int *least, int *greatest) { *least = 0; *greatest = -5; return depth ? OK : INVALID_CONTEXT; }
CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) { *c = &primary[d == 1]; BUMP(primary_retains, 1); return OK; }
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) { (void)d; BUMP(primary_retains, -1); return OK; }

/* ---- streams: cells on a list, so a handle made up by a test is known not to be one ---- */
static struct stream *streams;
static int green_streams, detached_calls;

/* Stream ids, unique in the process as the driver's (cuStreamGetId); made counts every stream
 * ever made, id_calls every cuStreamGetId. */
static unsigned long long next_stream_id = 40;
static int made, id_calls, device_calls;
int standin_streams_made(void) { return READ(made); }
int standin_id_calls(void) { return READ(id_calls); }
int standin_device_calls(void) { return READ(device_calls); }

static CUstream new_stream(struct ctx *c, struct green *g) {
    CUstream s = calloc(1, sizeof *s);
    s->ctx = c;
    s->green = g;
    BUMP(made, 1);
    pthread_mutex_lock(&mu);
    s->id = ++next_stream_id;
    s->attrs.sync = 1; /* CU_SYNC_POLICY_AUTO */
    s->next = streams;
    streams = s;
    BUMP(live_streams, 1);
    green_streams += g != NULL;
    pthread_mutex_unlock(&mu);
    return s;
}
static CUstream known_stream(CUstream s) {
    CUstream found = NULL;
    pthread_mutex_lock(&mu);
    for (CUstream p = streams; p && !found; p = p->next) found = p == s ? p : NULL;
    pthread_mutex_unlock(&mu);
    return found;
}

struct green { int destroyed, device, first, sm_count; struct ctx ctx; };
static int live_greens, green_misuse, detached_streams;
static unsigned long long next_green_id = 100;

int standin_green_streams(void) { return green_streams; }
int standin_live_greens(void) { return live_greens; }
int standin_green_misuse(void) { return green_misuse; }
int standin_detached_streams(void) { return detached_streams; }
int standin_detached_calls(void) { return detached_calls; }

CUresult cuStreamCreateWithPriority(CUstream *s, unsigned f, int p) {
    (void)f; (void)p;
    if (!depth) return INVALID_CONTEXT;
    *s = new_stream(stack[depth - 1], stack[depth - 1]->green);
    return OK;
}
/* Not custream's (it always gives a priority), but the least binding's (benches/floor_ext.c). */
CUresult cuStreamCreate(CUstream *s, unsigned f) { return cuStreamCreateWithPriority(s, f, 0); }
/* standin_sticky(code): a sticky fault (700, CUDA_ERROR_ILLEGAL_ADDRESS, as after a kernel
 * wrote to address 16): from then on every call on a stream or event answers it, the
 * destroys included (which still free: the objects went with the context). */
static int sticky;
static void run_callbacks(int status);
void standin_sticky(int code) {
    sticky = code;
    run_callbacks(code);
}
CUresult cuStreamDestroy_v2(CUstream s) {
    pthread_mutex_lock(&mu);
    for (CUstream *p = &streams; *p; p = &(*p)->next)
        if (*p == s) { *p = s->next; break; }
    BUMP(live_streams, -1);
    green_streams -= s->green != NULL;
    pthread_mutex_unlock(&mu);
    free(s);
    return sticky;
}
/* The default-stream tokens need a current context, as with a real driver; a stream whose
 * green context was destroyed is detached. */
static CUresult on(CUstream s) {
    if (sticky) return sticky;
    if ((uintptr_t)s <= 2) return depth ? OK : INVALID_CONTEXT;
    CUstream k = known_stream(s);
    if (k && k->green && k->green->destroyed) { detached_calls++; return STREAM_DETACHED; }
    return OK;
}
/* standin_slow_synchronize(ms): streams are busy (cuStreamQuery answers NOT_READY) and every
 * cuStreamSynchronize takes that long, so a test can have a thread inside the driver while
 * the interpreter exits. */
static unsigned slow_sync_ms;
void standin_slow_synchronize(unsigned ms) { slow_sync_ms = ms; }
/* How many threads are inside a slow cuStreamSynchronize now. */
static int in_synchronize;
int standin_in_synchronize(void) { return __atomic_load_n(&in_synchronize, __ATOMIC_RELAXED); }
CUresult cuStreamSynchronize(CUstream s) {
    if (slow_sync_ms) {
        struct timespec t = {slow_sync_ms / 1000, (long)(slow_sync_ms % 1000) * 1000000L};
        __atomic_add_fetch(&in_synchronize, 1, __ATOMIC_RELAXED);
        nanosleep(&t, NULL);
        __atomic_sub_fetch(&in_synchronize, 1, __ATOMIC_RELAXED);
    }
    return on(s);
}
/* standin_queries(): every cuStreamQuery, to see how a wait polled. */
static int queries;
int standin_queries(void) { return READ(queries); }
CUresult cuStreamQuery(CUstream s) {
    BUMP(queries, 1);
    return slow_sync_ms && on(s) == OK ? NOT_READY : on(s);
}
CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned f) { (void)e; (void)f; return on(s); }
CUresult cuStreamGetCtx(CUstream s, CUcontext *c) {
    if ((uintptr_t)s <= 2) *c = depth ? stack[depth - 1] : NULL;
    else {
        CUstream k = known_stream(s);
        *c = k ? k->ctx : &primary[0];
    }
    return *c ? OK : INVALID_CONTEXT;
}
/* A default-stream token's id is its context's: 1000 * the context's id + the token. */
CUresult cuStreamGetId(CUstream s, unsigned long long *id) {
    BUMP(id_calls, 1);
    if ((uintptr_t)s <= 2) {
        if (!depth) return INVALID_CONTEXT;
        *id = stack[depth - 1]->id * 1000 + (uintptr_t)s;
        return OK;
    }
    CUstream k = known_stream(s);
    if (!k) return INVALID_VALUE;
    *id = k->id;
    return OK;
}
/* CUDA 12.8: left out with -DSTANDIN_NO_STREAM_GET_DEVICE and omit=("cuStreamGetDevice",)
 * (an older driver). */
#ifndef STANDIN_NO_STREAM_GET_DEVICE
CUresult cuStreamGetDevice(CUstream s, CUdevice *d) {
    BUMP(device_calls, 1);
    if ((uintptr_t)s <= 2) {
        if (!depth) return INVALID_CONTEXT;
        *d = stack[depth - 1]->device;
        return OK;
    }
    CUstream k = known_stream(s);
    *d = k ? k->ctx->device : 0;
    return OK;
}
#endif
CUresult cuStreamGetFlags(CUstream s, unsigned *f) { (void)s; *f = 1; return OK; }
CUresult cuStreamGetPriority(CUstream s, int *p) { (void)s; *p = 0; return OK; }
enum { EVENT_DISABLE_TIMING = 2, EVENT_INTERPROCESS = 4 };
static unsigned event_serial;
static int imported_events;
int standin_imported_events(void) { return READ(imported_events); }
CUresult cuEventCreate(CUevent *e, unsigned f) {
    if ((f & EVENT_INTERPROCESS) && !(f & EVENT_DISABLE_TIMING)) return INVALID_VALUE;
    *e = calloc(1, sizeof **e);
    (*e)->flags = f;
    (*e)->serial = BUMP(event_serial, 1);
    BUMP(live_events, 1);
    return OK;
}
CUresult cuEventDestroy_v2(CUevent e) {
    if (e->imported) BUMP(imported_events, -1);
    free(e);
    BUMP(live_events, -1);
    return sticky;
}
typedef struct { char reserved[64]; } CUipcEventHandle;
CUresult cuIpcGetEventHandle(CUipcEventHandle *h, CUevent e) {
    if (!depth) return INVALID_CONTEXT;  /* as the driver answers on a thread with none current */
    if (!(e->flags & EVENT_INTERPROCESS) || e->imported) return INVALID_VALUE;
    memset(h, 0, sizeof *h);
    unsigned pid = (unsigned)getpid();
    memcpy(h->reserved, "standin-ipc-event", 17);
    memcpy(h->reserved + 32, &pid, sizeof pid);
    memcpy(h->reserved + 36, &e->serial, sizeof e->serial);
    return OK;
}
CUresult cuIpcOpenEventHandle(CUevent *e, CUipcEventHandle h) {
    if (memcmp(h.reserved, "standin-ipc-event", 17)) return INVALID_VALUE;
    if (!depth) return INVALID_CONTEXT;
    *e = calloc(1, sizeof **e);
    (*e)->flags = EVENT_INTERPROCESS | EVENT_DISABLE_TIMING;
    (*e)->imported = 1;
    memcpy(&(*e)->pid, h.reserved + 32, sizeof (*e)->pid);
    memcpy(&(*e)->serial, h.reserved + 36, sizeof (*e)->serial);
    BUMP(live_events, 1);
    BUMP(imported_events, 1);
    return OK;
}
/* Stream memory operations' addresses: any is device memory of device 0, as the driver
 * answers only in a context (with none current: CUDA_ERROR_INVALID_CONTEXT, as a driver may). */
CUresult cuPointerGetAttributes(unsigned n, int *attrs, void **data, unsigned long long ptr) {
    (void)ptr;
    if (!depth) return INVALID_CONTEXT;
    for (unsigned i = 0; i < n; i++) {
        if (attrs[i] == 2) *(unsigned *)data[i] = 2;            /* MEMORY_TYPE: device */
        else if (attrs[i] == 8) *(unsigned char *)data[i] = 0;  /* IS_MANAGED */
        else if (attrs[i] == 3) *(unsigned long long *)data[i] = ptr;
        else if (attrs[i] == 9) *(int *)data[i] = 0;
    }
    return OK;
}
CUresult cuDeviceGetUuid_v2(unsigned char *uuid, CUdevice d) {
    const char *base = getenv("STANDIN_UUID_BASE");
    if (d < 0 || d >= devices()) return INVALID_DEVICE;
    memset(uuid, 0, 16);
    memcpy(uuid, "standin", 7);
    uuid[15] = (unsigned char)(d + (base ? atoi(base) : 0));
    return OK;
}
CUresult cuEventRecord(CUevent e, CUstream s) { (void)e; return on(s); }
/* standin_hold(1): events stay pending (cuEventQuery: NOT_READY) and host functions are never
 * run, as when the GPU hangs; a sticky fault then ends it (a faulted driver runs no host
 * function, and every query answers the fault). */
static int hold;
void standin_hold(int on) {
    hold = on;
    if (!on) run_callbacks(OK);
}
CUresult cuEventSynchronize(CUevent e) { (void)e; return sticky; }
/* STANDIN_IMPORTED_PENDING=1: the work an exporter recorded never completes here;
 * standin_event_queries() counts the queries. */
static int event_queries;
int standin_event_queries(void) { return READ(event_queries); }
CUresult cuEventQuery(CUevent e) {
    BUMP(event_queries, 1);
    if (sticky) return sticky;
    return hold || (e->imported && getenv("STANDIN_IMPORTED_PENDING")) ? NOT_READY : OK;
}
/* No GPU work here: a host function runs at once, on the calling thread
 * (standin_host_funcs() counts them). */
typedef void (*hostfn)(void *);
static int host_funcs;
int standin_host_funcs(void) { return READ(host_funcs); }
CUresult cuLaunchHostFunc(CUstream s, hostfn fn, void *user) {
    BUMP(host_funcs, 1);
    CUresult r = on(s);
    if (r == OK && !hold) fn(user);
    return r;
}
CUresult cuEventElapsedTime(float *ms, CUevent a, CUevent b) { (void)a; (void)b; *ms = 0; return OK; }

/* ---- green contexts (left out with -DSTANDIN_NO_GREEN: a driver without them) ------------- */
#ifndef STANDIN_NO_GREEN
/* CUdevResource: 144 bytes; the stand-in keeps its notes in the driver's internal part. */
typedef struct {
    unsigned type;
    int device, first, split_output;
    unsigned char internal[92 - 3 * sizeof(int)];
    unsigned sm_count;
    unsigned char rest[44];
} __attribute__((aligned(8))) CUdevResource;
_Static_assert(sizeof(CUdevResource) == 144, "CUdevResource is 144 bytes");
_Static_assert(__builtin_offsetof(CUdevResource, sm_count) == 96, "smCount follows 96 bytes");
typedef CUdevResource *CUdevResourceDesc;
typedef struct green *CUgreenCtx;

static int misused(CUgreenCtx g) {
    if (g && !g->destroyed) return 0;
    green_misuse++;
    return 1;
}

CUresult cuDeviceGetDevResource(CUdevice d, CUdevResource *r, unsigned type) {
    if (type != RESOURCE_SM) return INVALID_RESOURCE_TYPE;
    if (d < 0 || d >= devices()) return INVALID_DEVICE;
    memset(r, 0, sizeof *r);
    r->type = RESOURCE_SM;
    r->device = d;
    r->sm_count = SMS;
    return OK;
}
CUresult cuDevSmResourceSplitByCount(CUdevResource *result, unsigned *groups, const CUdevResource *in,
                                     CUdevResource *rest, unsigned flags, unsigned min_count) {
    (void)flags;
    if (!in || in->type != RESOURCE_SM || !groups || !min_count) return INVALID_VALUE;
    if (in->split_output) return INVALID_RESOURCE_CONFIGURATION;
    unsigned size = (min_count + SM_GRANULE - 1) / SM_GRANULE * SM_GRANULE;
    unsigned possible = in->sm_count / size;
    if (!result) { *groups = possible; return OK; }
    unsigned made = *groups < possible ? *groups : possible;
    /* Drivers differ on a split that fits no group: fewer groups (none), or a refusal. */
    if (!made && getenv("STANDIN_SPLIT_REFUSES")) return INVALID_RESOURCE_CONFIGURATION;
    for (unsigned i = 0; i < made; i++) {
        result[i] = *in;
        result[i].first = in->first + (int)(i * size);
        result[i].sm_count = size;
        result[i].split_output = 1;
    }
    if (rest) {
        *rest = *in;
        rest->first = in->first + (int)(made * size);
        rest->sm_count = in->sm_count - made * size;
        rest->split_output = 1;
    }
    *groups = made;
    return OK;
}
CUresult cuDevResourceGenerateDesc(CUdevResourceDesc *desc, CUdevResource *r, unsigned n) {
    if (!desc || !r || n != 1 || r->type != RESOURCE_SM || !r->sm_count) return INVALID_VALUE;
    *desc = malloc(sizeof **desc);
    **desc = *r;
    return OK;
}
CUresult cuGreenCtxCreate(CUgreenCtx *g, CUdevResourceDesc desc, CUdevice d, unsigned flags) {
    if (!(flags & GREEN_DEFAULT_STREAM) || !desc || desc->device != d) return INVALID_VALUE;
    CUgreenCtx made = calloc(1, sizeof *made);
    made->device = d;
    made->first = desc->first;
    made->sm_count = (int)desc->sm_count;
    pthread_mutex_lock(&mu);
    made->ctx = (struct ctx){next_green_id++, d, made};
    live_greens++;
    BUMP(primary_retains, 1);  /* the driver retains the primary context for the green one's life */
    pthread_mutex_unlock(&mu);
    *g = made;
    return OK;
}
/* Never freed: a later call on it is counted, not a crash. */
CUresult cuGreenCtxDestroy(CUgreenCtx g) {
    if (misused(g)) return INVALID_CONTEXT;
    pthread_mutex_lock(&mu);
    for (CUstream p = streams; p; p = p->next) detached_streams += p->green == g;
    g->destroyed = 1;
    live_greens--;
    BUMP(primary_retains, -1);
    pthread_mutex_unlock(&mu);
    return OK;
}
CUresult cuGreenCtxGetDevResource(CUgreenCtx g, CUdevResource *r, unsigned type) {
    if (misused(g)) return INVALID_CONTEXT;
    if (type != RESOURCE_SM) return INVALID_RESOURCE_TYPE;
    memset(r, 0, sizeof *r);
    r->type = RESOURCE_SM;
    r->device = g->device;
    r->first = g->first;
    r->sm_count = (unsigned)g->sm_count;
    return OK;
}
CUresult cuGreenCtxStreamCreate(CUstream *s, CUgreenCtx g, unsigned flags, int priority) {
    (void)priority;
    if (misused(g)) return INVALID_CONTEXT;
    if (!(flags & NON_BLOCKING)) return INVALID_VALUE;
    *s = new_stream(&g->ctx, g);
    return OK;
}
CUresult cuCtxFromGreenCtx(CUcontext *c, CUgreenCtx g) {
    if (misused(g)) return INVALID_CONTEXT;
    *c = &g->ctx;
    return OK;
}
CUresult cuStreamGetGreenCtx(CUstream s, CUgreenCtx *g) {
    if ((uintptr_t)s <= 2) {
        if (!depth) return INVALID_CONTEXT;
        *g = stack[depth - 1]->green;
        return OK;
    }
    CUstream k = known_stream(s);
    *g = k ? k->green : NULL;
    return OK;
}

/* For tests: another library's green context of `sms` SMs (its first SM in *first), and a
 * stream made in one the way the runtime makes them (cuStreamCreate with the converted
 * context current). */
CUgreenCtx standin_foreign_green(unsigned sms) {
    CUdevResource all, group, rest;
    CUdevResourceDesc desc;
    unsigned n = 1;
    CUgreenCtx g = NULL;
    cuDeviceGetDevResource(0, &all, RESOURCE_SM);
    if (cuDevSmResourceSplitByCount(&group, &n, &all, &rest, 0, sms) != OK || n != 1) return NULL;
    if (cuDevResourceGenerateDesc(&desc, &group, 1) != OK) return NULL;
    cuGreenCtxCreate(&g, desc, 0, GREEN_DEFAULT_STREAM);
    return g;
}
CUstream standin_runtime_stream_in(CUgreenCtx g) {
    CUcontext c, popped;
    CUstream s = NULL;
    cuCtxFromGreenCtx(&c, g);
    cuCtxPushCurrent_v2(c);
    cuStreamCreateWithPriority(&s, NON_BLOCKING, 0);
    cuCtxPopCurrent_v2(&popped);
    return s;
}
int standin_green_first_sm(CUgreenCtx g) { return g->first; }
#endif /* STANDIN_NO_GREEN */

/* ---- stream callbacks (cuStreamAddCallback), as CUDA documents them ----------------------
 * Called once the work before them is done: at once here, on the calling thread, unless
 * standin_hold(1) holds the GPU; then they wait in a list, called by standin_hold(0) with
 * CUDA_SUCCESS, or by a sticky fault (standin_sticky) with the fault's status: the driver
 * still calls a callback after a fault, which it never does for cuLaunchHostFunc's functions.
 * standin_callbacks() counts the calls made, standin_callbacks_pending() the ones waiting. */
typedef void (*streamcb)(CUstream, CUresult, void *);
typedef struct pending_cb { streamcb fn; CUstream s; void *user; struct pending_cb *next; } pending_cb;
static pending_cb *pending_cbs;
static int callbacks, callbacks_waiting;
int standin_callbacks(void) { return READ(callbacks); }
int standin_callbacks_pending(void) { return READ(callbacks_waiting); }
static void run_callbacks(int status) {
    pthread_mutex_lock(&mu);
    pending_cb *list = pending_cbs, *reversed = NULL;
    pending_cbs = NULL;
    pthread_mutex_unlock(&mu);
    while (list) { pending_cb *n = list->next; list->next = reversed; reversed = list; list = n; }
    while (reversed) {
        pending_cb *n = reversed->next;
        BUMP(callbacks_waiting, -1);
        BUMP(callbacks, 1);
        reversed->fn(reversed->s, status, reversed->user);
        free(reversed);
        reversed = n;
    }
}
/* Left out with -DSTANDIN_NO_CALLBACKS: a driver without it. */
#ifndef STANDIN_NO_CALLBACKS
CUresult cuStreamAddCallback(CUstream s, streamcb fn, void *user, unsigned flags) {
    CUresult r = on(s);
    if (r != OK) return r;
    if (flags != 0 || !fn) return INVALID_VALUE;
    if (hold) {
        pending_cb *p = malloc(sizeof *p);
        *p = (pending_cb){fn, s, user, NULL};
        pthread_mutex_lock(&mu);
        p->next = pending_cbs;
        pending_cbs = p;
        pthread_mutex_unlock(&mu);
        BUMP(callbacks_waiting, 1);
        return OK;
    }
    BUMP(callbacks, 1);
    fn(s, OK, user);
    return OK;
}
#endif

/* ---- a stream's settings (cuStreamSetAttribute / GetAttribute / CopyAttributes) ----------
 * Kept per stream, checked as the driver checks them (the attribute's id, the policy, the
 * window's ratio, properties and size against the device's largest, the domain):
 * CUDA_ERROR_INVALID_VALUE otherwise. The default-stream tokens share one set (custream only
 * reads it). standin_attribute_calls() counts the calls. */
enum { ATTR_WINDOW = 1, ATTR_SYNC = 3, ATTR_DOMAIN = 10 };
static struct attrs token_attrs __attribute__((unused)) = {1, {0, 0, 0, 0, 0}, 0};
static int attribute_calls;
int standin_attribute_calls(void) { return READ(attribute_calls); }
/* Left out with -DSTANDIN_NO_ATTRIBUTES: a driver without them. */
#ifndef STANDIN_NO_ATTRIBUTES
/* A release function for the C face's tests (Custream_ReleaseAfter): counts its calls and
 * keeps the thread of the last; standin_this_thread() is the caller's, to compare with. */
static int releases;
static unsigned long release_thread;
void standin_release(void *ctx) {
    (void)ctx;
    __atomic_store_n(&release_thread, (unsigned long)pthread_self(), __ATOMIC_RELAXED);
    BUMP(releases, 1);
}
int standin_releases(void) { return READ(releases); }
unsigned long standin_release_thread(void) { return __atomic_load_n(&release_thread, __ATOMIC_RELAXED); }
unsigned long standin_this_thread(void) { return (unsigned long)pthread_self(); }

static struct attrs *attrs_of(CUstream s) {
    if ((uintptr_t)s <= 2) return &token_attrs;
    CUstream k = known_stream(s);
    return k ? &k->attrs : NULL;
}
CUresult cuStreamSetAttribute(CUstream s, int id, const AttrValue *v) {
    BUMP(attribute_calls, 1);
    CUresult r = on(s);
    if (r != OK) return r;
    struct attrs *a = attrs_of(s);
    if (!a) return INVALID_HANDLE;
    switch (id) {
    case ATTR_SYNC:
        if (v->sync < 1 || v->sync > 4) return INVALID_VALUE;
        a->sync = v->sync;
        return OK;
    case ATTR_WINDOW:
        if (v->window.bytes > (size_t)max_window || !(v->window.hit_ratio >= 0 && v->window.hit_ratio <= 1) ||
            v->window.hit < 0 || v->window.hit > 2 || v->window.miss < 0 || v->window.miss > 2)
            return INVALID_VALUE;
        a->window = v->window;
        return OK;
    case ATTR_DOMAIN:
        if (v->domain < 0 || v->domain > 1) return INVALID_VALUE;
        a->domain = v->domain;
        return OK;
    default: return INVALID_VALUE;
    }
}
CUresult cuStreamGetAttribute(CUstream s, int id, AttrValue *v) {
    BUMP(attribute_calls, 1);
    CUresult r = on(s);
    if (r != OK) return r;
    struct attrs *a = attrs_of(s);
    if (!a) return INVALID_HANDLE;
    memset(v, 0, sizeof *v);
    switch (id) {
    case ATTR_SYNC: v->sync = a->sync; return OK;
    case ATTR_WINDOW: v->window = a->window; return OK;
    case ATTR_DOMAIN: v->domain = a->domain; return OK;
    default: return INVALID_VALUE;
    }
}
CUresult cuStreamCopyAttributes(CUstream dst, CUstream src) {
    BUMP(attribute_calls, 1);
    CUresult r = on(dst) != OK ? on(dst) : on(src);
    if (r != OK) return r;
    struct attrs *d = attrs_of(dst), *from = attrs_of(src);
    if (!d || !from) return INVALID_HANDLE;
    *d = *from;
    return OK;
}
#endif
