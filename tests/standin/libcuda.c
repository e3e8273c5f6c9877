/* A stand-in libcuda for CPU tests of custream's own bookkeeping (pools, the current
 * stream, the default-stream rule, the primary-context retains): one device, streams and
 * events as heap cells, counters the tests read back with ctypes. It runs no GPU work and
 * checks nothing a real driver checks; what needs a real driver is in tests/gpu/. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int CUresult;
typedef int CUdevice;
typedef struct ctx { unsigned long long id; } *CUcontext;
typedef void *CUstream;
typedef void *CUevent;

enum { OK = 0, INVALID_VALUE = 1, INVALID_DEVICE = 101, INVALID_CONTEXT = 201, NOT_READY = 600 };

static struct ctx primary = {1};
static int primary_retains, live_streams, live_events, pushes;
static __thread CUcontext stack[16];
static __thread int depth;

int standin_primary_retains(void) { return primary_retains; }
int standin_live_streams(void) { return live_streams; }
int standin_live_events(void) { return live_events; }
int standin_pushes(void) { return pushes; }
/* Like cuDevicePrimaryCtxReset in another library: the context gets a new id. */
void standin_reset_primary(void) { primary.id++; }

CUresult cuInit(unsigned f) { (void)f; return OK; }
CUresult cuDriverGetVersion(int *v) { *v = 13000; return OK; }
CUresult cuGetErrorName(CUresult e, const char **s) { *s = e == INVALID_CONTEXT ? "CUDA_ERROR_INVALID_CONTEXT" : "CUDA_ERROR_STANDIN"; return OK; }
CUresult cuGetErrorString(CUresult e, const char **s) { (void)e; *s = "stand-in driver"; return OK; }
CUresult cuDeviceGetCount(int *n) { *n = 1; return OK; }
CUresult cuDeviceGet(CUdevice *d, int i) { *d = i; return i == 0 ? OK : INVALID_DEVICE; }
CUresult cuDeviceGetName(char *s, int n, CUdevice d) { (void)d; strncpy(s, "stand-in", (size_t)n); return OK; }
CUresult cuDeviceTotalMem_v2(size_t *b, CUdevice d) { (void)d; *b = 0; return OK; }
CUresult cuDeviceGetAttribute(int *v, int a, CUdevice d) { (void)a; (void)d; *v = 9; return OK; }
CUresult cuCtxGetCurrent(CUcontext *c) { *c = depth ? stack[depth - 1] : NULL; return OK; }
CUresult cuCtxGetDevice(CUdevice *d) { *d = 0; return depth ? OK : INVALID_CONTEXT; }
CUresult cuCtxGetId(CUcontext c, unsigned long long *id) { *id = c->id; return OK; }
CUresult cuCtxPushCurrent_v2(CUcontext c) { stack[depth++] = c; pushes++; return OK; }
CUresult cuCtxPopCurrent_v2(CUcontext *c) { *c = depth ? stack[--depth] : NULL; return OK; }
CUresult cuCtxGetStreamPriorityRange(int *least, int *greatest) { *least = 0; *greatest = -5; return depth ? OK : INVALID_CONTEXT; }
CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) { (void)d; *c = &primary; primary_retains++; return OK; }
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) { (void)d; primary_retains--; return OK; }
CUresult cuStreamCreateWithPriority(CUstream *s, unsigned f, int p) { (void)f; (void)p; if (!depth) return INVALID_CONTEXT; *s = malloc(16); live_streams++; return OK; }
CUresult cuStreamDestroy_v2(CUstream s) { free(s); live_streams--; return OK; }
/* The default-stream tokens need a current context, as with a real driver. */
static CUresult on(CUstream s) { return (uintptr_t)s <= 2 && !depth ? INVALID_CONTEXT : OK; }
/* standin_slow_synchronize(ms): streams are busy (cuStreamQuery answers NOT_READY) and every
 * cuStreamSynchronize takes that long, so a test can have a thread inside the driver while
 * the interpreter exits. */
static unsigned slow_sync_ms;
void standin_slow_synchronize(unsigned ms) { slow_sync_ms = ms; }
CUresult cuStreamSynchronize(CUstream s) {
    if (slow_sync_ms) {
        struct timespec t = {slow_sync_ms / 1000, (long)(slow_sync_ms % 1000) * 1000000L};
        nanosleep(&t, NULL);
    }
    return on(s);
}
CUresult cuStreamQuery(CUstream s) { return slow_sync_ms && on(s) == OK ? NOT_READY : on(s); }
CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned f) { (void)e; (void)f; return on(s); }
CUresult cuStreamGetCtx(CUstream s, CUcontext *c) { *c = (uintptr_t)s <= 2 ? (depth ? stack[depth - 1] : NULL) : &primary; return *c ? OK : INVALID_CONTEXT; }
CUresult cuStreamGetFlags(CUstream s, unsigned *f) { (void)s; *f = 1; return OK; }
CUresult cuStreamGetPriority(CUstream s, int *p) { (void)s; *p = 0; return OK; }
CUresult cuEventCreate(CUevent *e, unsigned f) { (void)f; *e = malloc(16); live_events++; return OK; }
CUresult cuEventDestroy_v2(CUevent e) { free(e); live_events--; return OK; }
CUresult cuEventRecord(CUevent e, CUstream s) { (void)e; return on(s); }
CUresult cuEventSynchronize(CUevent e) { (void)e; return OK; }
CUresult cuEventQuery(CUevent e) { (void)e; return OK; }
CUresult cuEventElapsedTime(float *ms, CUevent a, CUevent b) { (void)a; (void)b; *ms = 0; return OK; }
