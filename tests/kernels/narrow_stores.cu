// st.8 and st.16: neighbouring threads store bytes and halfwords of the same words.
extern "C" __global__ void narrow_stores(const unsigned* a, unsigned* bytes, unsigned* halves)
{
    unsigned t = threadIdx.x;
    ((unsigned char*)bytes)[t] = (unsigned char)(a[t] * 17u + 1u);
    ((unsigned short*)halves)[t] = (unsigned short)(a[t] * 1000u + 3u);
}
