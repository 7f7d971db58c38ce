// Fused embedding-bag forward, sum pooling, fp32, over ALL tables of a set in one launch (like
// FBGEMM's table-batched embedding). Compiled at run time by NVRTC (no headers needed).
//
// Layout (built by collector-native/src/cuda.rs):
//   weights        all tables concatenated, table t at weight_offsets[t] (floats), row-major rows x dims[t]
//   indices        all lookups of all tables concatenated (row ids, 32-bit)
//   offsets        (batch + 1) absolute positions into `indices` per table: bag b of table t is
//                  indices[offsets[t*(batch+1)+b] .. offsets[t*(batch+1)+b+1])
//   out            batch x total_dim, table t in columns col_offsets[t] .. col_offsets[t] + dims[t]
// Mapping: one warp per (table, bag), table-major so neighbouring warps read the same table; each
// lane owns 4 consecutive columns (float4) and strides by 128 columns. Every dim, weight offset,
// column offset and total_dim is a multiple of 4, so every float4 access is 16-byte aligned.
// Known limit: a table of dim < 128 leaves lanes idle (dim 4 uses one lane of 32); FBGEMM packs
// several bags per warp for small dims.

extern "C" __global__ void embedding_bag_fwd(
    const float* __restrict__ weights,
    const unsigned long long* __restrict__ weight_offsets,
    const unsigned int* __restrict__ dims,
    const unsigned int* __restrict__ col_offsets,
    const unsigned int* __restrict__ indices,
    const unsigned long long* __restrict__ offsets,
    float* __restrict__ out,
    unsigned int num_tables,
    unsigned int batch,
    unsigned int total_dim)
{
    const unsigned long long warp = (blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x) >> 5;
    const unsigned int lane = threadIdx.x & 31u;
    if (warp >= (unsigned long long)num_tables * batch) {
        return;
    }
    const unsigned int t = (unsigned int)(warp / batch);
    const unsigned int b = (unsigned int)(warp % batch);
    const unsigned int d = dims[t];
    const float* __restrict__ w = weights + weight_offsets[t];
    const unsigned long long base = (unsigned long long)t * (batch + 1ull);
    const unsigned long long begin = offsets[base + b];
    const unsigned long long end = offsets[base + b + 1];
    float* __restrict__ o = out + (unsigned long long)b * total_dim + col_offsets[t];
    for (unsigned int c = lane * 4u; c < d; c += 128u) {
        float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
        for (unsigned long long k = begin; k < end; ++k) {
            const unsigned long long row = indices[k];
            const float4 v = *reinterpret_cast<const float4*>(w + row * d + c);
            acc.x += v.x;
            acc.y += v.y;
            acc.z += v.z;
            acc.w += v.w;
        }
        *reinterpret_cast<float4*>(o + c) = acc;
    }
}
