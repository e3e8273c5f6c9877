/*
 * raw_driver.c: the floor under custream's driver-bound operations, timed in C.
 *
 * No CUDA header and no -lcuda: the few driver entry points are declared here and found with
 * dlopen/dlsym, so this builds with a bare gcc wherever libcuda.so.1 can be loaded.
 *
 *     gcc -O2 -o raw_driver raw_driver.c -ldl && ./raw_driver [repeats] [target_ms] [op,op,...]
 *
 * Prints one JSON object: machine facts and, per operation, the median ns per call over
 * `repeats` loops, each sized to last about `target_ms`. Operations run with the device's
 * primary context current (as the runtime API, CuPy, PyTorch and rmm leave it), on an idle
 * non-blocking stream.
 *
 *     gcc -O2 -shared -fPIC -DRAW_DRIVER_LIB -o libraw_driver.so raw_driver.c -ldl
 *
 * builds the same loops as a library with two entry points, raw_init() and raw_time(op, n),
 * which benches/worker.py calls through ctypes: the raw loop and custream's then run in one
 * process and thread, one repeat of each in turn, so that what moves the driver's cost
 * between processes and over a run moves both figures of a pair alike.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef void *CUstream;
#define CU_STREAM_NON_BLOCKING 0x1u

static CUresult (*cuInit)(unsigned);
static CUresult (*cuDriverGetVersion)(int *);
static CUresult (*cuDeviceGet)(CUdevice *, int);
static CUresult (*cuDeviceGetCount)(int *);
static CUresult (*cuDeviceGetName)(char *, int, CUdevice);
static CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
static CUresult (*cuDevicePrimaryCtxRelease)(CUdevice);
static CUresult (*cuCtxSetCurrent)(CUcontext);
static CUresult (*cuCtxGetCurrent)(CUcontext *);
static CUresult (*cuCtxGetDevice)(CUdevice *);
static CUresult (*cuCtxGetId)(CUcontext, unsigned long long *);
static CUresult (*cuCtxPushCurrent)(CUcontext);
static CUresult (*cuCtxPopCurrent)(CUcontext *);
static CUresult (*cuCtxGetStreamPriorityRange)(int *, int *);
static CUresult (*cuStreamCreate)(CUstream *, unsigned);
static CUresult (*cuStreamCreateWithPriority)(CUstream *, unsigned, int);
static CUresult (*cuStreamDestroy)(CUstream);
static CUresult (*cuStreamSynchronize)(CUstream);
static CUresult (*cuStreamQuery)(CUstream);

static void *lib;

static void *sym(const char *name) {
    void *p = dlsym(lib, name);
    if (!p) {
        printf("{\"error\": \"libcuda has no symbol %s\"}\n", name);
        exit(2);
    }
    return p;
}

#define CHECK(call)                                                                        \
    do {                                                                                   \
        CUresult r_ = (call);                                                              \
        if (r_ != 0) {                                                                     \
            printf("{\"error\": \"%s failed with CUresult %d\"}\n", #call, r_);            \
            exit(3);                                                                       \
        }                                                                                  \
    } while (0)

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* State the operations share. */
static CUdevice dev;
static CUcontext ctx;
static CUstream idle;
static volatile int64_t sink;

typedef void (*op_fn)(long n);

static void op_empty(long n) {
    for (long i = 0; i < n; i++) sink = i;
}

static void op_create_destroy(long n) {
    for (long i = 0; i < n; i++) {
        CUstream s;
        CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
        CHECK(cuStreamDestroy(s));
    }
}

/* The calls custream's Stream() and close() make (src/stream.rs, src/driver.rs), here from
 * a thread where the primary context is current (so no push/pop): to split custream's
 * create+destroy time into driver calls and everything else. */
static void op_custream_call_sequence(long n) {
    for (long i = 0; i < n; i++) {
        CUcontext cur, c;
        CUdevice d2;
        unsigned long long id;
        CUstream s;
        CHECK(cuCtxGetCurrent(&cur)); /* the default device: the current context's */
        if (cur) CHECK(cuCtxGetDevice(&d2));
        CHECK(cuDevicePrimaryCtxRetain(&c, dev));
        CHECK(cuCtxGetId(c, &id)); /* c is current (cur): no push and pop */
        CHECK(cuStreamCreateWithPriority(&s, CU_STREAM_NON_BLOCKING, 0));
        CHECK(cuCtxGetId(c, &id)); /* close(): the context is still the one it was */
        CHECK(cuStreamDestroy(s));
        CHECK(cuDevicePrimaryCtxRelease(dev));
    }
}

/* cuStreamCreateWithPriority(.., 0), as custream creates, makes the stream cuStreamCreate
 * makes: what, if anything, the variant costs more than create_destroy (on the H200: no
 * difference beyond the noise, 6,254 against 6,378 ns). */
static void op_create_destroy_with_priority(long n) {
    for (long i = 0; i < n; i++) {
        CUstream s;
        CHECK(cuStreamCreateWithPriority(&s, CU_STREAM_NON_BLOCKING, 0));
        CHECK(cuStreamDestroy(s));
    }
}

/* Create and destroy as custream does it from a thread with no current context (the
 * benchmark's Python worker): the create between a push and a pop of the primary context,
 * the destroy with nothing current (cuStreamDestroy finds the stream's own context). */
static void op_create_destroy_no_current(long n) {
    CUcontext popped;
    CHECK(cuCtxSetCurrent(NULL));
    for (long i = 0; i < n; i++) {
        CUstream s;
        CHECK(cuCtxPushCurrent(ctx));
        CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
        CHECK(cuCtxPopCurrent(&popped));
        CHECK(cuStreamDestroy(s));
    }
    CHECK(cuCtxSetCurrent(ctx));
}

/* Single calls of that sequence, to price each one. */
static void op_push_pop(long n) {
    CUcontext popped;
    for (long i = 0; i < n; i++) {
        CHECK(cuCtxPushCurrent(ctx));
        CHECK(cuCtxPopCurrent(&popped));
    }
}

static void op_retain_release(long n) {
    CUcontext c;
    for (long i = 0; i < n; i++) {
        CHECK(cuDevicePrimaryCtxRetain(&c, dev));
        CHECK(cuDevicePrimaryCtxRelease(dev));
    }
}

static void op_priority_range(long n) {
    int least, greatest;
    for (long i = 0; i < n; i++) CHECK(cuCtxGetStreamPriorityRange(&least, &greatest));
}

static void op_get_current(long n) {
    CUcontext c;
    for (long i = 0; i < n; i++) CHECK(cuCtxGetCurrent(&c));
}

static void op_ctx_get_id(long n) {
    unsigned long long id;
    for (long i = 0; i < n; i++) CHECK(cuCtxGetId(ctx, &id));
}

/* A query as custream makes it: first the check that the stream's context was not reset. */
static void op_query_checked(long n) {
    unsigned long long id;
    for (long i = 0; i < n; i++) {
        CHECK(cuCtxGetId(ctx, &id));
        CHECK(cuStreamQuery(idle));
    }
}

static void op_synchronize(long n) {
    for (long i = 0; i < n; i++) CHECK(cuStreamSynchronize(idle));
}

static void op_query(long n) {
    for (long i = 0; i < n; i++) CHECK(cuStreamQuery(idle));
}

/* Load the driver, make the primary context of device 0 current, create the idle stream.
 * 0 on success; an error has been printed as JSON otherwise. */
static CUresult destroy_no_current;
static int version, count;
static char name[256];

static int setup(void) {
    lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) lib = dlopen("libcuda.so", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        printf("{\"error\": \"cannot load libcuda.so.1: %s\"}\n", dlerror());
        return 1;
    }
    cuInit = sym("cuInit");
    cuDriverGetVersion = sym("cuDriverGetVersion");
    cuDeviceGet = sym("cuDeviceGet");
    cuDeviceGetCount = sym("cuDeviceGetCount");
    cuDeviceGetName = sym("cuDeviceGetName");
    cuDevicePrimaryCtxRetain = sym("cuDevicePrimaryCtxRetain");
    cuDevicePrimaryCtxRelease = sym("cuDevicePrimaryCtxRelease_v2");
    cuCtxSetCurrent = sym("cuCtxSetCurrent");
    cuCtxGetCurrent = sym("cuCtxGetCurrent");
    cuCtxGetDevice = sym("cuCtxGetDevice");
    cuCtxGetId = sym("cuCtxGetId");
    cuCtxPushCurrent = sym("cuCtxPushCurrent_v2");
    cuCtxPopCurrent = sym("cuCtxPopCurrent_v2");
    cuCtxGetStreamPriorityRange = sym("cuCtxGetStreamPriorityRange");
    cuStreamCreate = sym("cuStreamCreate");
    cuStreamCreateWithPriority = sym("cuStreamCreateWithPriority");
    cuStreamDestroy = sym("cuStreamDestroy_v2");
    cuStreamSynchronize = sym("cuStreamSynchronize");
    cuStreamQuery = sym("cuStreamQuery");

    CHECK(cuInit(0));
    CHECK(cuDriverGetVersion(&version));
    CHECK(cuDeviceGetCount(&count));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuDeviceGetName(name, sizeof name - 1, dev));
    for (char *p = name; *p; p++)
        if (*p == '"' || *p == '\\') *p = ' ';
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cuCtxSetCurrent(ctx));
    CHECK(cuStreamCreate(&idle, CU_STREAM_NON_BLOCKING));

    /* A fact custream's close() relies on: cuStreamDestroy with no current context. */
    CUstream probe;
    CHECK(cuStreamCreate(&probe, CU_STREAM_NON_BLOCKING));
    CHECK(cuCtxSetCurrent(NULL));
    destroy_no_current = cuStreamDestroy(probe);
    CHECK(cuCtxSetCurrent(ctx));
    return 0;
}

static const struct {
    const char *key;
    op_fn f;
} ops[] = {
    {"empty_loop", op_empty},
    {"create_destroy", op_create_destroy},
    {"create_destroy_with_priority", op_create_destroy_with_priority},
    {"create_destroy_no_current", op_create_destroy_no_current},
    {"custream_call_sequence", op_custream_call_sequence},
    {"ctx_push_pop", op_push_pop},
    {"primary_ctx_retain_release", op_retain_release},
    {"priority_range", op_priority_range},
    {"ctx_get_current", op_get_current},
    {"ctx_get_id", op_ctx_get_id},
    {"synchronize", op_synchronize},
    {"query", op_query},
    {"query_checked", op_query_checked},
};
static const int n_ops = (int)(sizeof ops / sizeof ops[0]);

#ifdef RAW_DRIVER_LIB

int raw_init(void) { return lib ? 0 : setup(); }

/* Does nothing: called through ctypes.CDLL (which lets the GIL go around a call) and
 * ctypes.PyDLL (which does not), the difference is what a release and retake of the GIL costs. */
void raw_nop(void) {}

/* Nanoseconds that n calls of operation `key` take, or -1 for an unknown key. */
double raw_time(const char *key, long n) {
    for (int i = 0; i < n_ops; i++)
        if (strcmp(ops[i].key, key) == 0) {
            int64_t t = now_ns();
            ops[i].f(n);
            return (double)(now_ns() - t);
        }
    return -1;
}

#else

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median ns per call; loops sized to last about target_ms each. */
static void bench(const char *key, op_fn f, int repeats, double target_ms, int last) {
    long n = 1;
    int64_t t;
    f(1);
    for (;;) {
        t = now_ns();
        f(n);
        t = now_ns() - t;
        if (t >= target_ms * 1e5 || n >= 100000000L) break;
        n *= 10;
    }
    double per = (double)t / n;
    if (per < 0.01) per = 0.01;
    n = (long)(target_ms * 1e6 / per);
    if (n < 1) n = 1;
    double *v = malloc(sizeof(double) * repeats);
    for (int r = 0; r < repeats; r++) {
        t = now_ns();
        f(n);
        v[r] = (double)(now_ns() - t) / n;
    }
    qsort(v, repeats, sizeof(double), cmp_double);
    double med = repeats % 2 ? v[repeats / 2] : (v[repeats / 2 - 1] + v[repeats / 2]) / 2;
    printf("    \"%s\": {\"ns\": %.2f, \"min_ns\": %.2f, \"max_ns\": %.2f, \"repeats\": %d, \"number\": %ld}%s\n",
           key, med, v[0], v[repeats - 1], repeats, n, last ? "" : ",");
    free(v);
}

/* Whether `key` is in the comma-separated list `only` (NULL: every operation). */
static int selected(const char *only, const char *key) {
    if (!only) return 1;
    size_t k = strlen(key);
    for (const char *p = only; *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == k && strncmp(p, key, k) == 0) return 1;
        if (!end) break;
        p = end + 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    int repeats = argc > 1 ? atoi(argv[1]) : 15;
    double target_ms = argc > 2 ? atof(argv[2]) : 20.0;
    const char *only = argc > 3 ? argv[3] : NULL;
    if (repeats < 1) repeats = 1;
    if (setup() != 0) return 1;

    printf("{\n  \"gpu\": \"%s\",\n  \"driver_version\": %d,\n  \"device_count\": %d,\n", name, version, count);
    printf("  \"destroy_with_no_current_context\": %d,\n", destroy_no_current);
    printf("  \"ops\": {\n");
    int last = -1;
    for (int i = 0; i < n_ops; i++)
        if (selected(only, ops[i].key)) last = i;
    for (int i = 0; i < n_ops; i++)
        if (selected(only, ops[i].key)) bench(ops[i].key, ops[i].f, repeats, target_ms, i == last);
    printf("  }\n}\n");
    fflush(stdout);

    CHECK(cuStreamDestroy(idle));
    CHECK(cuDevicePrimaryCtxRelease(dev));
    return 0;
}

#endif
