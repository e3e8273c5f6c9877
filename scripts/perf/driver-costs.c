// What the driver itself costs, in C loops on a GPU machine: the figures docs/benchmarks.md
// uses to say where each row's time goes (issue 26). Build and run it there:
//     gcc -O2 -o /tmp/driver-costs scripts/perf/driver-costs.c -I/usr/local/cuda/include -lcuda -lpthread
//     /tmp/driver-costs [SECTION...]      (the sections below; all without one)
// 1. ns per call of what custream adds beside the call a row exists for (best of 7 loops);
// 2. the round trip of custream's host-function hand-off written in C (one cuStreamBatchMemOp
//    [write ready=1, wait done==1, write done=0], a thread spinning on `ready` that raises
//    `done`) against cuLaunchHostFunc, each followed by cuStreamSynchronize;
// 3. how many commands a held stream takes before a launch waits (a memset, a memory
//    operation; then a second held stream), and that cuLaunchHostFunc has no such cap;
// 4. what one more hand-off costs the launching thread behind N commands, 1,000 a held stream
//    (the bench's pending row; run with CUDA_DEVICE_MAX_CONNECTIONS=16, as its worker is);
// 5. a lock-prefixed read-modify-write, which custream's use counts and exit protocol make;
// 6. create + destroy with K other streams alive in the context (custream keeps 16 notifier
//    streams and their 16 bells per context once it made a stream there), by their priority:
//    run it alone (`driver-costs 6`), since sections 3 and 4 leave 12 streams alive;
// 7. a spinning wait's latency, from a host thread releasing a held stream to the waiter
//    returning: cuStreamSynchronize on a "spin" stream, and polls of cuStreamQuery and
//    cuEventQuery (what custream's "spin" wait does), each median of 200.
#include <cuda.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CK(x) do { CUresult r_ = (x); if (r_) { const char *s_; cuGetErrorName(r_, &s_); printf("%s: %s\n", #x, s_); exit(1); } } while (0)
#define TIME(label, n, body)                                                                  \
    do {                                                                                      \
        double best = 1e9;                                                                    \
        for (int r = 0; r < 7; r++) {                                                         \
            double a = now();                                                                 \
            for (int i = 0; i < (n); i++) { body; }                                           \
            double t = (now() - a) / (n) * 1e9;                                               \
            best = t < best ? t : best;                                                       \
        }                                                                                     \
        printf("%-52s %9.1f ns\n", label, best);                                              \
    } while (0)

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static void CUDA_CB noop(void *u) { (void)u; }
static _Atomic unsigned *ready, *done, *hold;
static atomic_int stop;

static void *watcher(void *arg) {  // custream's thread, without Python
    while (!atomic_load(&stop))
        if (atomic_load_explicit(ready, memory_order_acquire)) {
            atomic_store(ready, 0);
            atomic_store_explicit(done, 1, memory_order_release);
        }
    return arg;
}
static void *release_later(void *arg) { sleep(2); atomic_store(hold, 1); return arg; }
static _Atomic double released_at;
static void *release_soon(void *arg) {  // 2 ms on, spinning (a sleep's wake-up would blur the time), then release
    double until = now() + 0.002;
    while (now() < until) {}
    released_at = now();
    atomic_store(hold, 1);
    return arg;
}

static int held_cap(CUstream a, CUstream b, CUdeviceptr word, CUdeviceptr buf, int kind) {
    atomic_store(hold, 0);
    CK(cuStreamWaitValue32(a, word, 1, CU_STREAM_WAIT_VALUE_GEQ));
    CK(cuStreamWaitValue32(b, word, 1, CU_STREAM_WAIT_VALUE_GEQ));
    pthread_t t;
    pthread_create(&t, NULL, release_later, NULL);
    int blocked = -1;
    for (int i = 0; i < 20000 && blocked < 0; i++) {
        double t0 = now();
        CUstream on = kind == 3 && i >= 800 ? b : a;
        if (kind == 0) CK(cuLaunchHostFunc(on, noop, NULL));
        else if (kind == 1) CK(cuMemsetD32Async(buf, i, 16, on));
        else CK(cuStreamWriteValue32(on, word + 256, i, 0));
        if (now() - t0 > 0.3) blocked = i;
    }
    pthread_join(t, NULL);
    CK(cuStreamSynchronize(a));
    CK(cuStreamSynchronize(b));
    return blocked;
}

static int argc_, wanted[8];
static int want(int k) { return argc_ <= 1 || wanted[k]; }

int main(int argc, char **argv) {
    argc_ = argc;
    for (int i = 1; i < argc; i++)
        if (atoi(argv[i]) > 0 && atoi(argv[i]) < 8) wanted[atoi(argv[i])] = 1;
    CK(cuInit(0));
    CUdevice d; CK(cuDeviceGet(&d, 0));
    CUcontext c, cur; CK(cuDevicePrimaryCtxRetain(&c, d)); CK(cuCtxSetCurrent(c));
    CUstream s, t; CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    unsigned long long id; CUdevice dev; int v;
    void *page;
    if (posix_memalign(&page, 65536, 65536)) return 1;
    memset(page, 0, 65536);
    CK(cuMemHostRegister(page, 65536, CU_MEMHOSTREGISTER_DEVICEMAP));
    CUdeviceptr dp; CK(cuMemHostGetDevicePointer(&dp, page, 0));
    ready = page, done = (void *)((char *)page + 64), hold = (void *)((char *)page + 128);
    CUstreamBatchMemOpParams p[3];
    memset(p, 0, sizeof p);
    p[0].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32, p[0].writeValue.address = dp, p[0].writeValue.value = 1;
    p[1].waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32, p[1].waitValue.address = dp + 64, p[1].waitValue.value = 1;
    p[1].waitValue.flags = CU_STREAM_WAIT_VALUE_EQ;
    p[2].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32, p[2].writeValue.address = dp + 64, p[2].writeValue.value = 0;

    if (want(1)) {
        printf("1. driver calls\n");
        TIME("cuStreamQuery, idle stream", 200000, CK(cuStreamQuery(s)));
        TIME("cuCtxGetId (custream's context-reset check)", 200000, CK(cuCtxGetId(c, &id)));
        TIME("cuCtxGetCurrent", 200000, CK(cuCtxGetCurrent(&cur)));
        TIME("cuCtxGetDevice", 200000, CK(cuCtxGetDevice(&dev)));
        TIME("cuDeviceGetCount", 200000, CK(cuDeviceGetCount(&v)));
        TIME("cuDevicePrimaryCtxRetain + Release", 200000, CK(cuDevicePrimaryCtxRetain(&cur, d)); CK(cuDevicePrimaryCtxRelease(d)));
        TIME("cuStreamSynchronize, idle stream", 200000, CK(cuStreamSynchronize(s)));
        TIME("cuStreamCreateWithPriority + cuStreamDestroy", 5000, CK(cuStreamCreateWithPriority(&t, 1, 0)); CK(cuStreamDestroy(t)));
    }

    if (want(2)) {
        printf("2. host-function round trips (launch + cuStreamSynchronize)\n");
        pthread_t w;
        pthread_create(&w, NULL, watcher, NULL);
        for (int round = 0; round < 3; round++) {
            TIME("cuLaunchHostFunc", 3000, CK(cuLaunchHostFunc(s, noop, NULL)); CK(cuStreamSynchronize(s)));
            TIME("custream's hand-off in C", 3000, CK(cuStreamBatchMemOp(s, 3, p, 0)); CK(cuStreamSynchronize(s)));
        }
        atomic_store(&stop, 1);
        pthread_join(w, NULL);
    }

    if (want(3)) {
        printf("3. commands a held stream takes before a launch waits (-1: 20,000 and no wait)\n");
        CUdeviceptr buf; CK(cuMemAlloc(&buf, 4096));
        CUstream a, b; CK(cuStreamCreate(&a, CU_STREAM_NON_BLOCKING)); CK(cuStreamCreate(&b, CU_STREAM_NON_BLOCKING));
        const char *what[] = {"cuLaunchHostFunc", "cuMemsetD32Async", "cuStreamWriteValue32",
                              "cuStreamWriteValue32, 800 on stream A then on B"};
        for (int kind = 0; kind < 4; kind++) printf("%-52s %9d\n", what[kind], held_cap(a, b, dp + 128, buf, kind));
    }

    if (want(4)) {
        printf("4. one hand-off launched behind N, 1,000 a held stream, on the last (median of 21)\n");
        CUstream held[10];
        for (int i = 0; i < 10; i++) CK(cuStreamCreate(&held[i], CU_STREAM_NON_BLOCKING));
        for (int n = 0; n <= 10000; n = n ? n * 10 : 1000) {
            int k_streams = n ? n / 1000 : 1;
            double took[21];
            for (int k = 0; k < 21; k++) {
                atomic_store(hold, 0);
                for (int j = 0; j < k_streams; j++) CK(cuStreamWaitValue32(held[j], dp + 128, 1, CU_STREAM_WAIT_VALUE_GEQ));
                for (int i = 0; i < n; i++) CK(cuStreamWriteValue32(held[i / 1000], dp + 256, i, 0));
                double t0 = now();
                CK(cuStreamBatchMemOp(held[k_streams - 1], 3, p, 0));
                took[k] = (now() - t0) * 1e9;
                atomic_store(hold, 1);
                atomic_store(done, 1); /* nobody watches `ready` now: let the batch's wait pass */
                for (int j = 0; j < k_streams; j++) CK(cuStreamSynchronize(held[j]));
            }
            for (int i = 1; i < 21; i++)
                for (int j = i; j > 0 && took[j] < took[j - 1]; j--) { double x = took[j]; took[j] = took[j - 1]; took[j - 1] = x; }
            printf("behind %-6d on %-2d held streams %31.0f ns\n", n, k_streams, took[10]);
        }
    }

    if (want(5)) {
        printf("5. custream's own bookkeeping\n");
        static _Atomic unsigned long counter;
        TIME("atomic_fetch_add (a lock-prefixed read-modify-write)", 2000000, atomic_fetch_add(&counter, 1));
    }

    if (want(6)) {
        printf("6. cuStreamCreate + cuStreamDestroy with K other streams alive\n");
        int lo, hi;
        CK(cuCtxGetStreamPriorityRange(&lo, &hi));
        CUstream alive[64];
        const int ks[] = {0, 8, 16, 32, 64, -32}; /* -32: 32 of the greatest priority */
        for (int k = 0; k < 6; k++) {
            int n = ks[k] < 0 ? -ks[k] : ks[k];
            for (int i = 0; i < n; i++) CK(cuStreamCreateWithPriority(&alive[i], CU_STREAM_NON_BLOCKING, ks[k] < 0 ? hi : 0));
            char label[64];
            snprintf(label, sizeof label, "%d streams alive%s", n, ks[k] < 0 ? ", greatest priority" : "");
            TIME(label, 2000, CK(cuStreamCreate(&t, CU_STREAM_NON_BLOCKING)); CK(cuStreamDestroy(t)));
            for (int i = 0; i < n; i++) CK(cuStreamDestroy(alive[i]));
        }
    }

    if (want(7)) {
        printf("7. a spinning wait's latency after a host thread releases the stream (median of 200)\n");
        CUstream spin; CK(cuStreamCreate(&spin, CU_STREAM_NON_BLOCKING));
        CUstreamAttrValue policy = {0};
        policy.syncPolicy = CU_SYNC_POLICY_SPIN;
        CK(cuStreamSetAttribute(spin, CU_STREAM_ATTRIBUTE_SYNCHRONIZATION_POLICY, &policy));
        CUevent ev; CK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
        const char *how[] = {"cuStreamSynchronize, a 'spin' stream", "poll cuStreamQuery", "poll cuEventQuery"};
        for (int m = 0; m < 3; m++) {
            double lat[200];
            for (int i = 0; i < 200; i++) {
                atomic_store(hold, 0);
                CK(cuStreamWaitValue32(spin, dp + 128, 1, CU_STREAM_WAIT_VALUE_GEQ));
                CK(cuEventRecord(ev, spin));
                pthread_t r;
                pthread_create(&r, NULL, release_soon, NULL);
                CUresult q = CUDA_SUCCESS;
                if (m == 0) CK(cuStreamSynchronize(spin));
                else while ((q = m == 1 ? cuStreamQuery(spin) : cuEventQuery(ev)) == CUDA_ERROR_NOT_READY) {}
                CK(q);
                double end = now();
                pthread_join(r, NULL);
                lat[i] = (end - released_at) * 1e9;
            }
            for (int i = 1; i < 200; i++)
                for (int j = i; j > 0 && lat[j] < lat[j - 1]; j--) { double x = lat[j]; lat[j] = lat[j - 1]; lat[j - 1] = x; }
            printf("%-52s %9.0f ns (p10 %.0f, p90 %.0f)\n", how[m], lat[100], lat[20], lat[180]);
        }
    }

    return 0;
}
