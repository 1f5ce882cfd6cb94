#pragma once
/* kbv measurement stub: this machine's CUDA has no cuBLAS headers */
typedef struct cublasContext* cublasHandle_t;
typedef enum { CUBLAS_STATUS_SUCCESS = 0 } cublasStatus_t;
