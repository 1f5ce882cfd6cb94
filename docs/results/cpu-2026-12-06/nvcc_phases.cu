#include <torch/extension.h>
__global__ void k(const float* x, float* y, int64_t n){ int64_t i=blockIdx.x*(int64_t)blockDim.x+threadIdx.x; if(i<n) y[i]=x[i]<0.f?0.f:x[i]; }
torch::Tensor relu_cuda(torch::Tensor x){ auto y=torch::empty_like(x); int64_t n=x.numel(); k<<<(n+255)/256,256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n); return y; }
