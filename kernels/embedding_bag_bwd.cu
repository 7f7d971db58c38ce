// Fused embedding-bag backward with the SGD update, fp32, over ALL tables of a set in one launch:
// for every lookup of row i in bag b of table t:  w_t[i, :] -= lr * grad[b, col_offsets[t] + :].
// Same layout and warp mapping as embedding_bag_fwd.cu.
//
// Duplicate indices: the update is applied with atomicAdd on each weight element. SGD without
// optimizer state is linear in the gradient, so applying every lookup's contribution atomically gives
// exactly the "sum the gradient per row, then update" result (up to float summation order), however
// often a row repeats within or across bags. FBGEMM's exact kernels instead sort the lookups by row
// and reduce each segment once (needed for stateful optimizers such as Adagrad); atomics were chosen
// here because they need no sort pass and no scratch memory. Cost note: very hot rows serialise on
// their atomics, which a sort+segment kernel would not; a record of this backend measures that.

extern "C" __global__ void embedding_bag_bwd_sgd(
    float* __restrict__ weights,
    const unsigned long long* __restrict__ weight_offsets,
    const unsigned int* __restrict__ dims,
    const unsigned int* __restrict__ col_offsets,
    const unsigned int* __restrict__ indices,
    const unsigned long long* __restrict__ offsets,
    const float* __restrict__ grad,
    unsigned int num_tables,
    unsigned int batch,
    unsigned int total_dim,
    float lr)
{
    const unsigned long long warp = (blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x) >> 5;
    const unsigned int lane = threadIdx.x & 31u;
    if (warp >= (unsigned long long)num_tables * batch) {
        return;
    }
    const unsigned int t = (unsigned int)(warp / batch);
    const unsigned int b = (unsigned int)(warp % batch);
    const unsigned int d = dims[t];
    float* __restrict__ w = weights + weight_offsets[t];
    const unsigned long long base = (unsigned long long)t * (batch + 1ull);
    const unsigned long long begin = offsets[base + b];
    const unsigned long long end = offsets[base + b + 1];
    const float* __restrict__ g = grad + (unsigned long long)b * total_dim + col_offsets[t];
    for (unsigned int c = lane * 4u; c < d; c += 128u) {
        const float4 gv = *reinterpret_cast<const float4*>(g + c);
        const float4 step = make_float4(-lr * gv.x, -lr * gv.y, -lr * gv.z, -lr * gv.w);
        for (unsigned long long k = begin; k < end; ++k) {
            float* dst = w + (unsigned long long)indices[k] * d + c;
#if __CUDA_ARCH__ >= 900
            // Hopper has 16-byte float atomics on global memory: one RED.ADD.F32x4 per lane instead
            // of four scalar ones (every dst is 16-byte aligned, see embedding_bag_fwd.cu).
            atomicAdd(reinterpret_cast<float4*>(dst), step);
#else
            atomicAdd(dst + 0, step.x);
            atomicAdd(dst + 1, step.y);
            atomicAdd(dst + 2, step.z);
            atomicAdd(dst + 3, step.w);
#endif
        }
    }
}
