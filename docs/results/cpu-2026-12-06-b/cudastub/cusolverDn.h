#pragma once
#include <cusolver_common.h>
typedef struct cusolverDnContext* cusolverDnHandle_t;
