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
/* Events, host functions and capture: present so that every entry point custream resolves is
 * there; none is on the profiled paths, beyond cuStreamIsCapturing when foreign-capture
 * checks are on (it answers "not capturing"). */
CUresult cuStreamWaitEvent(void *s, void *e, unsigned f) { (void)s; (void)e; (void)f; return 0; }
CUresult cuEventCreate(void **e, unsigned f) { (void)f; *e = (void *)(next_stream += 16); return 0; }
CUresult cuEventDestroy_v2(void *e) { (void)e; return 0; }
CUresult cuEventRecord(void *e, void *s) { (void)e; (void)s; return 0; }
CUresult cuEventSynchronize(void *e) { (void)e; return 0; }
CUresult cuEventQuery(void *e) { (void)e; return 0; }
CUresult cuEventElapsedTime(float *ms, void *a, void *b) { (void)a; (void)b; *ms = 0; return 0; }
CUresult cuLaunchHostFunc(void *s, void (*fn)(void *), void *user) { (void)s; (void)fn; (void)user; return 0; }
CUresult cuStreamBeginCapture_v2(void *s, int mode) { (void)s; (void)mode; return 0; }
CUresult cuStreamEndCapture(void *s, void **g) { (void)s; *g = 0; return 0; }
CUresult cuStreamIsCapturing(void *s, unsigned *status) { (void)s; *status = 0; return 0; }
CUresult cuThreadExchangeStreamCaptureMode(unsigned *mode) { (void)mode; return 0; }
CUresult cuGraphInstantiateWithFlags(void **x, void *g, unsigned long long f) { (void)g; (void)f; *x = 0; return 0; }
CUresult cuGraphGetNodes(void *g, void **nodes, size_t *n) { (void)g; (void)nodes; *n = 0; return 0; }
CUresult cuGraphDestroy(void *g) { (void)g; return 0; }
CUresult cuGraphExecDestroy(void *x) { (void)x; return 0; }
CUresult cuGraphLaunch(void *x, void *s) { (void)x; (void)s; return 0; }
CUresult cuGraphUpload(void *x, void *s) { (void)x; (void)s; return 0; }
CUresult cuUserObjectCreate(void **o, void *p, void (*d)(void *), unsigned n, unsigned f) {
    (void)p; (void)d; (void)n; (void)f; *o = 0; return 0;
}
CUresult cuUserObjectRelease(void *o, unsigned n) { (void)o; (void)n; return 0; }
CUresult cuGraphRetainUserObject(void *g, void *o, unsigned n, unsigned f) { (void)g; (void)o; (void)n; (void)f; return 0; }
