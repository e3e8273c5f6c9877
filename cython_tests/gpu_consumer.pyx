# cython: language_level=3
"""A Cython consumer that launches real work through the CUDA driver on a stream it got by
cimport, the way a library with its own kernels would. Built only on a machine with cuda.h."""

from libc.stdint cimport uintptr_t
from libc.stdlib cimport free, malloc

from custream cimport CUstream_st, Stream, from_handle_with_deleter, synchronize


cdef extern from "cuda.h" nogil:
    ctypedef int CUresult
    ctypedef int CUdevice
    ctypedef unsigned long long CUdeviceptr
    cdef struct CUctx_st:
        pass
    ctypedef CUctx_st *CUcontext
    # The struct custream declares: s.handle passes as a CUstream with no cast.
    ctypedef CUstream_st *CUstream
    enum:
        CUDA_SUCCESS
        CU_STREAM_NON_BLOCKING
    CUresult cuInit(unsigned int flags)
    CUresult cuGetErrorName(CUresult error, const char **name)
    CUresult cuDeviceGet(CUdevice *device, int ordinal)
    CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice device)
    CUresult cuDevicePrimaryCtxRelease(CUdevice device)
    CUresult cuCtxPushCurrent(CUcontext ctx)
    CUresult cuCtxPopCurrent(CUcontext *ctx)
    CUresult cuMemAlloc(CUdeviceptr *ptr, size_t size)
    CUresult cuMemFree(CUdeviceptr ptr)
    CUresult cuMemsetD8Async(CUdeviceptr ptr, unsigned char value, size_t n, CUstream stream)
    CUresult cuMemcpyDtoH(void *dst, CUdeviceptr src, size_t size)
    CUresult cuStreamCreate(CUstream *stream, unsigned int flags)
    CUresult cuStreamDestroy(CUstream stream)


cdef int check(CUresult r, str what) except -1:
    cdef const char *name = NULL
    if r != CUDA_SUCCESS:
        cuGetErrorName(r, &name)
        raise RuntimeError(f"{what} failed: {name.decode() if name != NULL else r}")
    return 0


cdef class _Primary:
    """The device's primary context, current on this thread inside a with block."""
    cdef CUdevice dev
    cdef CUcontext ctx

    def __cinit__(self, int ordinal):
        check(cuInit(0), "cuInit")
        check(cuDeviceGet(&self.dev, ordinal), "cuDeviceGet")
        check(cuDevicePrimaryCtxRetain(&self.ctx, self.dev), "cuDevicePrimaryCtxRetain")

    def __dealloc__(self):
        if self.ctx != NULL:
            cuDevicePrimaryCtxRelease(self.dev)

    def __enter__(self):
        check(cuCtxPushCurrent(self.ctx), "cuCtxPushCurrent")
        return self

    def __exit__(self, *exc):
        cdef CUcontext popped
        check(cuCtxPopCurrent(&popped), "cuCtxPopCurrent")


def memset_and_read(Stream s not None, int device, unsigned char value, size_t n):
    """cuMemsetD8Async(value) on s.handle, custream's synchronize, then copy back: returns
    how many of the n bytes hold value."""
    cdef CUdeviceptr ptr = 0
    cdef unsigned char *host = <unsigned char *>malloc(n)
    cdef CUresult r
    cdef size_t i, good = 0
    if host == NULL:
        raise MemoryError()
    try:
        for i in range(n):
            host[i] = value ^ 0xFF
        with _Primary(device):
            check(cuMemAlloc(&ptr, n), "cuMemAlloc")
            try:
                with nogil:
                    r = cuMemsetD8Async(ptr, value ^ 0xFF, n, s.handle)
                    if r == CUDA_SUCCESS:
                        r = cuMemsetD8Async(ptr, value, n, s.handle)
                check(r, "cuMemsetD8Async")
                synchronize(s)
                check(cuMemcpyDtoH(host, ptr, n), "cuMemcpyDtoH")
            finally:
                cuMemFree(ptr)
        for i in range(n):
            good += host[i] == value
        return good
    finally:
        free(host)


def device_field(Stream s not None):
    """The struct's device field: -1 until custream resolves it."""
    return s.device


# ---- a stream made here and handed to custream with a deleter ----------------------------

cdef int destroyed = 0
cdef CUresult last_destroy = CUDA_SUCCESS

ctypedef struct Owned:
    CUdevice dev
    CUcontext ctx


cdef void destroy_stream(void *ctx, CUstream_st *handle) noexcept:
    global destroyed, last_destroy
    cdef Owned *o = <Owned *>ctx
    cdef CUcontext popped
    cuCtxPushCurrent(o.ctx)
    last_destroy = cuStreamDestroy(handle)
    cuCtxPopCurrent(&popped)
    cuDevicePrimaryCtxRelease(o.dev)
    free(o)
    destroyed += 1


def make_owned_elsewhere(int device):
    """A stream created here, in the primary context, handed over with a deleter that
    destroys it."""
    cdef CUstream h = NULL
    cdef CUcontext popped
    cdef Owned *o = <Owned *>malloc(sizeof(Owned))
    if o == NULL:
        raise MemoryError()
    try:
        check(cuInit(0), "cuInit")
        check(cuDeviceGet(&o.dev, device), "cuDeviceGet")
        check(cuDevicePrimaryCtxRetain(&o.ctx, o.dev), "cuDevicePrimaryCtxRetain")
    except BaseException:
        free(o)
        raise
    try:
        check(cuCtxPushCurrent(o.ctx), "cuCtxPushCurrent")
        try:
            check(cuStreamCreate(&h, CU_STREAM_NON_BLOCKING), "cuStreamCreate")
        finally:
            cuCtxPopCurrent(&popped)
        return from_handle_with_deleter(h, device, destroy_stream, o)
    except BaseException:
        if h != NULL:
            cuStreamDestroy(h)
        cuDevicePrimaryCtxRelease(o.dev)
        free(o)
        raise


def destroy_record():
    """(deleter calls so far, the last cuStreamDestroy result)."""
    return destroyed, last_destroy
