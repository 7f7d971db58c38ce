// Flushes the device L2 between timed runs: reads and rewrites a buffer at least twice the L2 size
// (collector-native sizes it from CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE), so no weight, index or output
// line of the previous run is still cached when the next timed run starts. Grid-stride loop.
//
// Also holds `fill_uniform`, which initialises weights and gradients on the device with a
// counter-based hash (SplitMix64), so multi-GB tables never cross PCIe.

extern "C" __global__ void l2_flush(float* __restrict__ buf, unsigned long long n)
{
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n; i += stride) {
        buf[i] = buf[i] * 0.5f + 1.0f;
    }
}

extern "C" __global__ void fill_uniform(float* __restrict__ buf, unsigned long long n, unsigned long long seed)
{
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n; i += stride) {
        unsigned long long z = seed ^ (i * 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        buf[i] = ((float)(z >> 40) / 16777216.0f - 0.5f) * 0.01f;
    }
}
