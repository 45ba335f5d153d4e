"""Which NVIDIA GPUs this machine has, asked of the driver library alone
(no CUDA runtime in this process), for the CUDA tests and benchmarks."""

import ctypes


def cuda_devices():
    """(number of GPUs the NVIDIA driver sees, why there are none)."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        return 0, f"the NVIDIA driver library libcuda.so.1 cannot be loaded ({e})"
    status = cuda.cuInit(0)
    if status != 0:
        return 0, f"cuInit(0) returned CUresult {status}"
    count = ctypes.c_int(0)
    status = cuda.cuDeviceGetCount(ctypes.byref(count))
    if status != 0:
        return 0, f"cuDeviceGetCount returned CUresult {status}"
    if count.value == 0:
        return 0, "cuDeviceGetCount found no device"
    return count.value, ""
