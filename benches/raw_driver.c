/*
 * raw_driver.c: the driver calls timed in C, the floor under custream's (dlsym, no CUDA header).
 * worker.py calls raw_init() once through ctypes, then raw_time(op, n, ...) in turn with a Python
 * statement, in one thread, device 0's primary context current. floor_ext.c includes this file
 * for the driver's entry points (raw_load).
 */
#include <dlfcn.h>
#include <string.h>
#include <time.h>

typedef int CUresult;
typedef void *CUstream;

#define ENTRY_POINTS(X) X(cuInit, (unsigned)) X(cuDeviceGet, (int *, int)) X(cuCtxSetCurrent, (void *)) \
    X(cuDevicePrimaryCtxRetain, (void **, int)) X(cuStreamCreate, (CUstream *, unsigned)) \
    X(cuStreamDestroy_v2, (CUstream)) X(cuStreamSynchronize, (CUstream)) X(cuStreamQuery, (CUstream)) \
    X(cuLaunchHostFunc, (CUstream, void (*)(void *), void *)) X(cuGraphLaunch, (void *, CUstream))
#define DECLARE(name, args) static CUresult(*name) args;
ENTRY_POINTS(DECLARE)

/* Green contexts (CUDA 12.4), looked up apart so that an older driver runs the rest: 16 SMs of device 0. */
static CUresult (*cuGreenCtxStreamCreate)(CUstream *, void *, unsigned, int);
static void *green;
typedef struct { unsigned char b[144]; } __attribute__((aligned(8))) devres; /* CUdevResource */

static CUstream idle;
static int failed; /* the first failing CUresult */
#define CALL(call) do { CUresult r_ = (call); if (r_ && !failed) failed = r_; } while (0)

/* 0 once every entry point is found; 1: no libcuda, 2: one missing. */
int raw_load(void) {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
#define LOAD(name, args) if (!lib || !(name = dlsym(lib, #name))) return lib ? 2 : 1;
    ENTRY_POINTS(LOAD)
    return 0;
}

static void green_init(int dev) {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL), *desc;
    CUresult (*get)(int, devres *, unsigned) = dlsym(lib, "cuDeviceGetDevResource");
    CUresult (*split)(devres *, unsigned *, const devres *, devres *, unsigned, unsigned) =
        dlsym(lib, "cuDevSmResourceSplitByCount");
    CUresult (*describe)(void **, devres *, unsigned) = dlsym(lib, "cuDevResourceGenerateDesc");
    CUresult (*create)(void **, void *, int, unsigned) = dlsym(lib, "cuGreenCtxCreate");
    devres all = {{0}}, group = {{0}}, rest = {{0}};
    unsigned n = 1;
    cuGreenCtxStreamCreate = dlsym(lib, "cuGreenCtxStreamCreate");
    if (!get || !split || !describe || !create || !cuGreenCtxStreamCreate || get(dev, &all, 1 /* SM */) ||
        split(&group, &n, &all, &rest, 0, 16) || n != 1 || describe(&desc, &group, 1) || create(&green, desc, dev, 1))
        green = NULL;
}

/* 0 on success; else the failing step (1, 2: raw_load's; 3: a driver call failed). */
int raw_init(void) {
    void *ctx;
    int dev, r = raw_load();
    if (r) return r;
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx) ||
        cuStreamCreate(&idle, 1 /* non-blocking */))
        return 3;
    green_init(dev);
    return 0;
}

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static void nothing(void *user) { (void)user; }

/* The ns that n executions of operation `key` take, -1 once a call has failed (or for an unknown key): the ratio
 * rows' on an idle non-blocking stream; capture.py's on its stream `s`, a host function waited for (the round
 * trip), and launches of its graph `g` in batches of `batch`, with an untimed synchronize between, so the launch
 * queue never fills (what is timed is the launch, not the GPU). */
double raw_time(const char *key, long n, CUstream s, void *g, long batch) {
    double t = now_ns(), untimed = 0;
    if (strcmp(key, "create_destroy") == 0)
        for (long i = 0; i < n; i++) {
            CUstream made;
            CALL(cuStreamCreate(&made, 1));
            CALL(cuStreamDestroy_v2(made));
        }
    else if (strcmp(key, "green_create_destroy") == 0 && green)
        for (long i = 0; i < n; i++) {
            CUstream made;
            CALL(cuGreenCtxStreamCreate(&made, green, 1 /* non-blocking: required */, 0));
            CALL(cuStreamDestroy_v2(made));
        }
    else if (strcmp(key, "synchronize") == 0)
        for (long i = 0; i < n; i++) CALL(cuStreamSynchronize(idle));
    else if (strcmp(key, "query") == 0)
        for (long i = 0; i < n; i++) CALL(cuStreamQuery(idle));
    else if (strcmp(key, "host_func") == 0)
        for (long i = 0; i < n; i++) {
            CALL(cuLaunchHostFunc(s, nothing, NULL));
            CALL(cuStreamSynchronize(s));
        }
    else if (strcmp(key, "graph_launch") == 0)
        for (long done = 0; done < n; done += batch) {
            for (long i = 0; i < batch && done + i < n; i++) CALL(cuGraphLaunch(g, s));
            double u = now_ns();
            CALL(cuStreamSynchronize(s));
            untimed += now_ns() - u;
        }
    else
        return -1;
    return failed ? -1 : now_ns() - t - untimed;
}
