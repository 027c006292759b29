// %tid.y, %ctaid.z, %ntid.y and %nctaid.z of a 2 x 2 x 1 CTA in a 1 x 1 x 2 grid.
extern "C" __global__ void dims_small(unsigned* out)
{
    unsigned t = threadIdx.x + 2 * threadIdx.y + 4 * blockIdx.z;
    out[t] = threadIdx.y | blockIdx.z << 4 | blockDim.y << 8 | gridDim.z << 12;
}
