/* The kokoro custom-op domain's parts (ops.c registers them). */
#ifndef KOKORO_OPS_H
#define KOKORO_OPS_H
#include "onnxruntime_c_api.h"

extern const OrtApi *ort;
extern const OrtCustomOp snake;
extern const OrtCustomOp conv_integer_1d;
extern const OrtCustomOp conv_integer_1d_scaled;
int conv_integer_1d_runs_here(void);

#endif
