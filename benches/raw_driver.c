/*
 * raw_driver.c: the driver calls timed in C, the floor under custream's (dlsym, no CUDA header).
 * worker.py calls raw_init() once through ctypes, then raw_time(op, n) in turn with a Python
 * statement, in one thread, device 0's primary context current, on an idle non-blocking
 * stream. raw_host_func and raw_graph_launch: capture.py's, on its stream and graph. Each
 * timer returns the nanoseconds its n executions took, -1 once a call has failed.
 * floor_ext.c includes this file for the driver's entry points (raw_load).
 */
#include <dlfcn.h>
#include <string.h>
#include <time.h>

typedef int CUresult;
typedef void *CUcontext;
typedef void *CUstream;

static CUresult (*cuInit)(unsigned);
static CUresult (*cuDeviceGet)(int *, int);
static CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, int);
static CUresult (*cuCtxSetCurrent)(CUcontext);
static CUresult (*cuStreamCreate)(CUstream *, unsigned);
static CUresult (*cuStreamDestroy)(CUstream);
static CUresult (*cuStreamSynchronize)(CUstream);
static CUresult (*cuStreamQuery)(CUstream);
static CUresult (*cuLaunchHostFunc)(CUstream, void (*)(void *), void *);
static CUresult (*cuGraphLaunch)(void *, CUstream);

static CUstream idle;
static int failed; /* the first failing CUresult */

#define CALL(call) do { CUresult r_ = (call); if (r_ && !failed) failed = r_; } while (0)
#define SYM(f, name) if (!(f = dlsym(lib, name))) return 2

/* 0 once every entry point is found; 1: no libcuda, 2: a symbol missing. */
int raw_load(void) {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return 1;
    SYM(cuInit, "cuInit"); SYM(cuDeviceGet, "cuDeviceGet"); SYM(cuCtxSetCurrent, "cuCtxSetCurrent");
    SYM(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain"); SYM(cuStreamQuery, "cuStreamQuery");
    SYM(cuStreamCreate, "cuStreamCreate"); SYM(cuStreamDestroy, "cuStreamDestroy_v2");
    SYM(cuStreamSynchronize, "cuStreamSynchronize"); SYM(cuLaunchHostFunc, "cuLaunchHostFunc");
    SYM(cuGraphLaunch, "cuGraphLaunch");
    return 0;
}

/* 0 on success; else the failing step (1, 2: raw_load's; 3: a driver call failed). */
int raw_init(void) {
    CUcontext ctx;
    int dev, r = raw_load();
    if (r) return r;
    return cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx) ||
           cuStreamCreate(&idle, 1 /* non-blocking */) ? 3 : 0;
}

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

/* Operation `key` of the ratio rows (-1 for an unknown key too). */
double raw_time(const char *key, long n) {
    double t = now_ns();
    if (strcmp(key, "create_destroy") == 0) {
        for (long i = 0; i < n; i++) {
            CUstream s;
            CALL(cuStreamCreate(&s, 1));
            CALL(cuStreamDestroy(s));
        }
    } else if (strcmp(key, "synchronize") == 0) {
        for (long i = 0; i < n; i++) CALL(cuStreamSynchronize(idle));
    } else if (strcmp(key, "query") == 0) {
        for (long i = 0; i < n; i++) CALL(cuStreamQuery(idle));
    } else {
        return -1;
    }
    return failed ? -1 : now_ns() - t;
}

static void nothing(void *user) { (void)user; }

/* n host functions queued on `s`, each waited for: the round trip. */
double raw_host_func(CUstream s, long n) {
    double t = now_ns();
    for (long i = 0; i < n; i++) {
        CALL(cuLaunchHostFunc(s, nothing, NULL));
        CALL(cuStreamSynchronize(s));
    }
    return failed ? -1 : now_ns() - t;
}

/* n launches of `g` on `s` in batches, with an untimed synchronize between, so the launch
 * queue never fills: what is timed is the launch, not the GPU. */
double raw_graph_launch(void *g, CUstream s, long batch, long n) {
    double total = 0;
    for (long done = 0; done < n; done += batch) {
        double t = now_ns();
        for (long i = 0; i < batch && done + i < n; i++) CALL(cuGraphLaunch(g, s));
        total += now_ns() - t;
        CALL(cuStreamSynchronize(s));
    }
    return failed ? -1 : total;
}
