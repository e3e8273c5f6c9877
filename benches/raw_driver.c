/*
 * raw_driver.c: the driver calls timed in C, the floor under custream's (dlsym, no CUDA header).
 * worker.py calls raw_init() once through ctypes, then raw_time(op, n) in turn with a Python
 * statement, in one thread, device 0's primary context current, on an idle non-blocking
 * stream. raw_host_func and raw_graph_launch: capture.py's, on its stream and graph.
 */
#include <dlfcn.h>
#include <string.h>
#include <time.h>

typedef int CUresult;
typedef void *CUcontext;
typedef void *CUstream;
typedef void *CUgraphExec;

static CUresult (*cuInit)(unsigned);
static CUresult (*cuDeviceGet)(int *, int);
static CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, int);
static CUresult (*cuCtxSetCurrent)(CUcontext);
static CUresult (*cuStreamCreate)(CUstream *, unsigned);
static CUresult (*cuStreamDestroy)(CUstream);
static CUresult (*cuStreamSynchronize)(CUstream);
static CUresult (*cuStreamQuery)(CUstream);
static CUresult (*cuLaunchHostFunc)(CUstream, void (*)(void *), void *);
static CUresult (*cuGraphLaunch)(CUgraphExec, CUstream);

/* Green contexts (CUDA 12.4): looked up apart, so an older driver still runs the rest. */
static CUresult (*cuGreenCtxStreamCreate)(CUstream *, void *, unsigned, int);
static void *green; /* 16 SMs of device 0, made by green_init */
typedef struct { unsigned char b[144]; } __attribute__((aligned(8))) devres; /* CUdevResource */

static CUstream idle;
static int failed; /* the first failing CUresult, reported by raw_time as -1 */

#define CALL(call) \
    do { CUresult r_ = (call); if (r_ && !failed) failed = r_; } while (0)

#define SYM(f, name) if (!(f = dlsym(lib, name))) return 2

static void green_init(void *lib, int dev) {
    CUresult (*get)(int, devres *, unsigned) = dlsym(lib, "cuDeviceGetDevResource");
    CUresult (*split)(devres *, unsigned *, const devres *, devres *, unsigned, unsigned) =
        dlsym(lib, "cuDevSmResourceSplitByCount");
    CUresult (*desc)(void **, devres *, unsigned) = dlsym(lib, "cuDevResourceGenerateDesc");
    CUresult (*create)(void **, void *, int, unsigned) = dlsym(lib, "cuGreenCtxCreate");
    devres all = {{0}}, group = {{0}}, rest = {{0}};
    unsigned n = 1;
    void *d;
    cuGreenCtxStreamCreate = dlsym(lib, "cuGreenCtxStreamCreate");
    if (!get || !split || !desc || !create || !cuGreenCtxStreamCreate || get(dev, &all, 1 /* SM */) ||
        split(&group, &n, &all, &rest, 0, 16) || n != 1 || desc(&d, &group, 1) || create(&green, d, dev, 1))
        green = NULL;
}

/* 0 on success; else the failing step (1: no libcuda, 2: a symbol missing, 3: a call failed). */
int raw_init(void) {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    CUcontext ctx;
    int dev;
    if (!lib) return 1;
    SYM(cuInit, "cuInit"); SYM(cuDeviceGet, "cuDeviceGet"); SYM(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
    SYM(cuCtxSetCurrent, "cuCtxSetCurrent"); SYM(cuStreamCreate, "cuStreamCreate"); SYM(cuStreamDestroy, "cuStreamDestroy_v2");
    SYM(cuStreamSynchronize, "cuStreamSynchronize"); SYM(cuStreamQuery, "cuStreamQuery");
    SYM(cuLaunchHostFunc, "cuLaunchHostFunc"); SYM(cuGraphLaunch, "cuGraphLaunch");
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx) ||
        cuStreamCreate(&idle, 1 /* non-blocking */))
        return 3;
    green_init(lib, dev);
    return 0;
}

/* Nanoseconds that n executions of operation `key` take; -1 for an unknown key or a failed call. */
double raw_time(const char *key, long n) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (strcmp(key, "create_destroy") == 0) {
        for (long i = 0; i < n; i++) {
            CUstream s;
            CALL(cuStreamCreate(&s, 1));
            CALL(cuStreamDestroy(s));
        }
    } else if (strcmp(key, "green_create_destroy") == 0 && green) {
        for (long i = 0; i < n; i++) {
            CUstream s;
            CALL(cuGreenCtxStreamCreate(&s, green, 1 /* non-blocking, required */, 0));
            CALL(cuStreamDestroy(s));
        }
    } else if (strcmp(key, "synchronize") == 0) {
        for (long i = 0; i < n; i++) CALL(cuStreamSynchronize(idle));
    } else if (strcmp(key, "query") == 0) {
        for (long i = 0; i < n; i++) CALL(cuStreamQuery(idle));
    } else {
        return -1;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return failed ? -1 : (double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec);
}

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
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
double raw_graph_launch(CUgraphExec g, CUstream s, long batch, long n) {
    double total = 0;
    for (long done = 0; done < n; done += batch) {
        double t = now_ns();
        for (long i = 0; i < batch && done + i < n; i++) CALL(cuGraphLaunch(g, s));
        total += now_ns() - t;
        CALL(cuStreamSynchronize(s));
    }
    return failed ? -1 : total;
}
