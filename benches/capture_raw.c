/*
 * capture_raw.c: the C floors of benches/capture.py, one loop per row, called through ctypes
 * (outside the loop's clock). No CUDA header, no -lcuda: libcuda.so.1 is opened with dlopen.
 * Every function returns the elapsed ns of its loop, or -CUresult on failure.
 *
 *     gcc -O2 -shared -fPIC -o libcapture_raw.so capture_raw.c -ldl
 */
#include <dlfcn.h>
#include <stdint.h>
#include <time.h>

typedef int CUresult;
typedef void *CUstream;
typedef void *CUgraphExec;
typedef void (*CUhostFn)(void *);

static CUresult (*cuLaunchHostFunc)(CUstream, CUhostFn, void *);
static CUresult (*cuStreamSynchronize)(CUstream);
static CUresult (*cuGraphLaunch)(CUgraphExec, CUstream);

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

int cr_init(void) {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!lib) lib = dlopen("libcuda.so.1", RTLD_NOW);
    if (!lib) return -1;
    cuLaunchHostFunc = (CUresult(*)(CUstream, CUhostFn, void *))dlsym(lib, "cuLaunchHostFunc");
    cuStreamSynchronize = (CUresult(*)(CUstream))dlsym(lib, "cuStreamSynchronize");
    cuGraphLaunch = (CUresult(*)(CUgraphExec, CUstream))dlsym(lib, "cuGraphLaunch");
    return cuLaunchHostFunc && cuStreamSynchronize && cuGraphLaunch ? 0 : -2;
}

static void count(void *user) { __atomic_add_fetch((long *)user, 1, __ATOMIC_RELAXED); }
static long calls;

/* Queue a host function on an idle stream and wait until it ran, n times. */
int64_t cr_host_func_round_trip(CUstream s, long n) {
    int64_t t = now_ns();
    for (long i = 0; i < n; i++) {
        CUresult r = cuLaunchHostFunc(s, count, &calls);
        if (!r) r = cuStreamSynchronize(s);
        if (r) return -r;
    }
    return now_ns() - t;
}

/* n launches, in batches with a synchronize between them that the clock leaves out, so the
 * launch queue never fills: what is timed is the launch, not the GPU. */
int64_t cr_graph_launch(CUgraphExec g, CUstream s, long batch, long n) {
    int64_t total = 0;
    for (long done = 0; done < n;) {
        long k = n - done < batch ? n - done : batch;
        int64_t t = now_ns();
        for (long i = 0; i < k; i++) {
            CUresult r = cuGraphLaunch(g, s);
            if (r) return -r;
        }
        total += now_ns() - t;
        if (cuStreamSynchronize(s)) return -1;
        done += k;
    }
    return total;
}
