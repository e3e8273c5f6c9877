/*
 * stub_libcuda.c: a do-nothing libcuda.so.1, for profile_cpu.py --stub-driver ONLY.
 *
 * Every entry point custream calls on its create/synchronize/query/close paths returns
 * CUDA_SUCCESS at once, so callgrind counts custream's own instructions around the driver
 * (argument checks, the lifecycle word, the GIL release, the context push/pop calls) on a
 * machine without a GPU. It is never used by the tests: they run against a real driver or
 * skip. The real driver's own cost is what raw_driver.c measures on the GPU machine.
 *
 *     gcc -O2 -shared -fPIC -o libcuda.so.1 stub_libcuda.c
 */
#include <stdint.h>
#include <string.h>

typedef int CUresult;
static char fake_context;
static uintptr_t next_stream = 0x100000;
static void *current;

CUresult cuInit(unsigned flags) { (void)flags; return 0; }
CUresult cuDriverGetVersion(int *v) { *v = 13000; return 0; }
CUresult cuDeviceGetCount(int *n) { *n = 1; return 0; }
CUresult cuDeviceGet(int *d, int ordinal) { *d = ordinal; return 0; }
CUresult cuDeviceGetName(char *name, int len, int dev) {
    (void)dev;
    strncpy(name, "stub device (profiling only)", (size_t)len);
    return 0;
}
CUresult cuDeviceTotalMem_v2(size_t *bytes, int dev) { (void)dev; *bytes = 1; return 0; }
CUresult cuDeviceGetAttribute(int *v, int attr, int dev) { (void)attr; (void)dev; *v = 9; return 0; }
CUresult cuDevicePrimaryCtxRetain(void **ctx, int dev) { (void)dev; *ctx = &fake_context; return 0; }
CUresult cuDevicePrimaryCtxRelease_v2(int dev) { (void)dev; return 0; }
CUresult cuCtxGetCurrent(void **ctx) { *ctx = current; return 0; }
CUresult cuCtxSetCurrent(void *ctx) { current = ctx; return 0; }
CUresult cuCtxGetDevice(int *d) { *d = 0; return 0; }
CUresult cuCtxGetId(void *ctx, unsigned long long *id) { (void)ctx; *id = 1; return 0; }
CUresult cuCtxPushCurrent_v2(void *ctx) { current = ctx; return 0; }
CUresult cuCtxPopCurrent_v2(void **ctx) { *ctx = current; current = 0; return 0; }
CUresult cuCtxGetStreamPriorityRange(int *least, int *greatest) { *least = 0; *greatest = -5; return 0; }
CUresult cuStreamCreate(void **s, unsigned flags) { (void)flags; *s = (void *)(next_stream += 16); return 0; }
CUresult cuStreamCreateWithPriority(void **s, unsigned flags, int prio) {
    (void)flags; (void)prio;
    *s = (void *)(next_stream += 16);
    return 0;
}
CUresult cuStreamDestroy_v2(void *s) { (void)s; return 0; }
CUresult cuStreamSynchronize(void *s) { (void)s; return 0; }
CUresult cuStreamQuery(void *s) { (void)s; return 0; }
CUresult cuStreamGetCtx(void *s, void **ctx) { (void)s; *ctx = &fake_context; return 0; }
CUresult cuStreamGetFlags(void *s, unsigned *f) { (void)s; *f = 1; return 0; }
CUresult cuStreamGetPriority(void *s, int *p) { (void)s; *p = 0; return 0; }
CUresult cuGetErrorName(CUresult e, const char **s) { (void)e; *s = "CUDA_ERROR_STUB"; return 0; }
CUresult cuGetErrorString(CUresult e, const char **s) { (void)e; *s = "stub driver"; return 0; }
