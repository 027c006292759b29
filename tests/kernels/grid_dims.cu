// Thread (0,0,0) of each CTA records blockDim and gridDim in all three dimensions.
extern "C" __global__ void grid_dims(int* out)
{
    if (threadIdx.x != 0 || threadIdx.y != 0 || threadIdx.z != 0) return;
    int cta = (blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
    out[2 * cta + 0] = (blockDim.z << 16) | (blockDim.y << 8) | blockDim.x;
    out[2 * cta + 1] = (gridDim.z << 16) | (gridDim.y << 8) | gridDim.x;
}
