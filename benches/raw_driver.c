/* raw_driver.c: the driver calls timed in C loops (dlsym, no CUDA header), device 0's primary context current:
 * worker.py calls raw_init() once, then raw_time(op, n, ...) in turn with a Python loop. floor_ext.c includes it. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

typedef int CUresult;
typedef void *CUstream;
/* A CUstreamAttrValue (64 bytes) as CU_STREAM_ATTRIBUTE_SYNCHRONIZATION_POLICY (SYNC_POLICY) reads and sets it. */
typedef union { unsigned char pad[64]; int policy; } AttrValue;
#define SYNC_POLICY 3

#define ENTRY_POINTS(X) X(cuInit, (unsigned)) X(cuDeviceGet, (int *, int)) X(cuCtxSetCurrent, (void *)) \
    X(cuDevicePrimaryCtxRetain, (void **, int)) X(cuStreamCreate, (CUstream *, unsigned)) \
    X(cuStreamDestroy_v2, (CUstream)) X(cuStreamSynchronize, (CUstream)) X(cuStreamQuery, (CUstream)) \
    X(cuLaunchHostFunc, (CUstream, void (*)(void *), void *)) X(cuGraphLaunch, (void *, CUstream)) \
    X(cuStreamWriteValue32_v2, (CUstream, unsigned long long, unsigned, unsigned)) \
    X(cuStreamWaitValue32_v2, (CUstream, unsigned long long, unsigned, unsigned)) \
    X(cuPointerGetAttributes, (unsigned, int *, void **, unsigned long long)) \
    X(cuStreamGetCtx, (CUstream, void **)) X(cuCtxGetId, (void *, unsigned long long *)) \
    X(cuStreamSetAttribute, (CUstream, int, const void *)) X(cuStreamGetAttribute, (CUstream, int, void *))
#define DECLARE(name, args) static CUresult(*name) args;
ENTRY_POINTS(DECLARE)

static CUresult (*cuGreenCtxStreamCreate)(CUstream *, void *, unsigned, int); /* CUDA 12.4: looked up apart */

static CUstream idle;
static int failed; /* the first failing CUresult */
#define CALL(call) do { CUresult r_ = (call); if (r_ && !failed) failed = r_; } while (0)

/* 0 once every entry point is found; 1: no libcuda, 2: one missing; raw_init: 3, a driver call failed. */
int raw_load(void) {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
#define LOAD(name, args) if (!lib || !(name = dlsym(lib, #name))) return lib ? 2 : 1;
    ENTRY_POINTS(LOAD)
    cuGreenCtxStreamCreate = dlsym(lib, "cuGreenCtxStreamCreate");
    return 0;
}

int raw_init(void) {
    void *ctx;
    int dev, r = raw_load();
    return r ? r : (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx) ||
                    cuStreamCreate(&idle, 1 /* non-blocking */)) ? 3 : 0;
}

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static void nothing(void *user) { (void)user; }

/* What custream checks before a memory operation (the "memops_checked" loop, floor_ext.c's fwrite/fwait): that the
 * stream's context was not reset (src/stream/methods.rs's check_context: one cuCtxGetId, the context learned once per
 * stream), and what the driver knows of the address, so a freed buffer is a ValueError, not a GPU fault
 * (src/driver/memops.rs's pointer_info: the memory type, managed, the device pointer, the ordinal, in zeroed words). */
static void ask(CUstream s, unsigned long long word) {
    static CUstream known;
    static void *ctx;
    static unsigned long long id;
    unsigned long long now = 0;
    if (s != known) {
        CALL(cuStreamGetCtx(s, &ctx));
        CALL(cuCtxGetId(ctx, &id));
        known = s;
    }
    CALL(cuCtxGetId(ctx, &now));
    if (now != id && !failed) failed = 709; /* CUDA_ERROR_CONTEXT_IS_DESTROYED */
    int attrs[4] = {2 /* MEMORY_TYPE */, 8 /* IS_MANAGED */, 3 /* DEVICE_POINTER */, 9 /* DEVICE_ORDINAL */};
    unsigned long long v[4] = {0};
    void *data[4] = {&v[0], &v[1], &v[2], &v[3]};
    CALL(cuPointerGetAttributes(4, attrs, data, word));
}

/* The ns that n executions of `key` take, -1 once a call has failed: on an idle stream, or in the green context `g`;
 * capture.py's on its stream `s`, launches of its graph `g` (memops: a write and a wait of the 32-bit word at device
 * address `g`; memops_checked makes custream's checks before each; host_func_empty: cuLaunchHostFunc of an empty
 * function), an untimed synchronize every `batch`. sync_policy_set / _get: cuStreamSetAttribute / GetAttribute of the
 * idle stream's synchronization policy. */
double raw_time(const char *key, long n, CUstream s, void *g, long batch) {
    double t = now_ns(), untimed = 0;
    int green = strcmp(key, "green_create_destroy") == 0; /* non-blocking, as a green context's must be */
    if (green ? cuGreenCtxStreamCreate && g : strcmp(key, "create_destroy") == 0)
        for (long i = 0; i < n; i++) {
            CUstream made;
            CALL(green ? cuGreenCtxStreamCreate(&made, g, 1, 0) : cuStreamCreate(&made, 1));
            CALL(cuStreamDestroy_v2(made));
        }
    else if (strcmp(key, "synchronize") == 0)
        for (long i = 0; i < n; i++) CALL(cuStreamSynchronize(idle));
    else if (strcmp(key, "query") == 0)
        for (long i = 0; i < n; i++) CALL(cuStreamQuery(idle));
    else if (strncmp(key, "sync_policy_", 12) == 0) { /* s.sync_policy = 'spin' (CU_SYNC_POLICY_SPIN), s.sync_policy */
        AttrValue v = {{0}};
        v.policy = 2;
        int set = strcmp(key, "sync_policy_set") == 0;
        for (long i = 0; i < n; i++)
            CALL(set ? cuStreamSetAttribute(idle, SYNC_POLICY, &v) : cuStreamGetAttribute(idle, SYNC_POLICY, &v));
    }
    else if (strcmp(key, "host_func") == 0)
        for (long i = 0; i < n; i++) {
            CALL(cuLaunchHostFunc(s, nothing, NULL));
            CALL(cuStreamSynchronize(s));
        }
    else if (strcmp(key, "graph_launch") == 0 || strncmp(key, "memops", 6) == 0 || strcmp(key, "host_func_empty") == 0)
        for (long done = 0; done < n; done += batch) {
            int memops = key[0] == 'm', checked = strcmp(key, "memops_checked") == 0, hostfn = key[0] == 'h';
            unsigned long long word = (unsigned long long)(uintptr_t)g;
            for (long i = 0; i < batch && done + i < n; i++)
                if (memops) {
                    if (checked) ask(s, word);
                    CALL(cuStreamWriteValue32_v2(s, word, 1, 0));
                    if (checked) ask(s, word);
                    CALL(cuStreamWaitValue32_v2(s, word, 1, 0 /* geq */));
                } else if (hostfn)
                    CALL(cuLaunchHostFunc(s, nothing, NULL)); /* keep_alive's reference: an empty host function */
                else
                    CALL(cuGraphLaunch(g, s));
            double u = now_ns();
            CALL(cuStreamSynchronize(s));
            untimed += now_ns() - u;
        }
    else
        return -1;
    return failed ? -1 : now_ns() - t - untimed;
}

/* waits.py's floor for a wait that does not spin: when a host function queued on `s` behind the kernel runs
 * (CLOCK_MONOTONIC), -1 after a failed call. */
static volatile double stamped;
static void stamp(void *user) { (void)user; stamped = now_ns(); }
double raw_hostfn(CUstream s) {
    CALL(cuLaunchHostFunc(s, stamp, NULL));
    CALL(cuStreamSynchronize(s));
    return failed ? -1 : stamped;
}

/* waits.py's clock for "the kernel ended": spin until the kernel's last write reaches mapped host memory, then read
 * CLOCK_MONOTONIC (Python's time.monotonic_ns). Called through ctypes, which lets the GIL go. -1 after `limit_ns`. */
double raw_watch(volatile int *flag, double limit_ns) {
    double start = now_ns(), t;
    while (!__atomic_load_n(flag, __ATOMIC_ACQUIRE))
        if ((t = now_ns()) - start > limit_ns) return -1;
    return now_ns();
}

/* raw_watch on a thread of its own, which never takes the GIL (a Python thread returning from it would, just as the
 * waiter wakes, and the waiter would wait for it): raw_watch_start before the kernel, raw_watch_join for its time. */
static volatile int *watched;
static double watch_limit_ns, watched_at;
static pthread_t watcher;
static void *watch(void *arg) { watched_at = raw_watch(watched, watch_limit_ns); return arg; }
int raw_watch_start(volatile int *flag, double limit_ns) {
    watched = flag, watch_limit_ns = limit_ns;
    return pthread_create(&watcher, NULL, watch, NULL);
}
double raw_watch_join(void) { return pthread_join(watcher, NULL) ? -1 : watched_at; }
