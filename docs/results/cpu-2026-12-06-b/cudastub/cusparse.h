#pragma once
/* kbv measurement stub: this machine's CUDA has no cuSPARSE headers */
typedef struct cusparseContext* cusparseHandle_t;
typedef enum { CUSPARSE_STATUS_SUCCESS = 0 } cusparseStatus_t;
const char* cusparseGetErrorString(cusparseStatus_t);
