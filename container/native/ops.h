/* The kokoro custom-op domain's parts (ops.c registers them), and what every op of it shares. */
#ifndef KOKORO_OPS_H
#define KOKORO_OPS_H
#include <stddef.h>
#include <stdint.h>

#include "onnxruntime_c_api.h"

extern const OrtApi *ort;
extern const OrtCustomOp snake;
extern const OrtCustomOp conv_integer_1d;
extern const OrtCustomOp conv_integer_1d_scaled;
int conv_integer_1d_runs_here(void);

#define TRY(call)                            \
    do {                                     \
        OrtStatus *status_ = (call);         \
        if (status_ != NULL) return status_; \
    } while (0)

/* A tensor's rank, its first three dimensions (rank 3 at most) and, where count is not NULL, its element count. */
OrtStatus *tensor_shape(const OrtValue *value, int64_t dims[3], size_t *rank, size_t *count);

/* The parts every kokoro op shares: a CPU kernel, one output, every input and output required and in CPU memory,
 * any opset version. */
const char *ORT_API_CALL op_on_cpu_provider(const OrtCustomOp *op);
size_t ORT_API_CALL op_one_output(const OrtCustomOp *op);
OrtCustomOpInputOutputCharacteristic ORT_API_CALL op_required(const OrtCustomOp *op, size_t index);
OrtMemType ORT_API_CALL op_in_cpu_memory(const OrtCustomOp *op, size_t index);
int ORT_API_CALL op_since_1(const OrtCustomOp *op);
int ORT_API_CALL op_any_version(const OrtCustomOp *op);
#define KOKORO_CPU_OP(...)                             \
    {                                                  \
        .version = ORT_API_VERSION,                    \
        .GetExecutionProviderType = op_on_cpu_provider, \
        .GetOutputTypeCount = op_one_output,           \
        .GetInputCharacteristic = op_required,         \
        .GetOutputCharacteristic = op_required,        \
        .GetInputMemoryType = op_in_cpu_memory,        \
        .GetStartVersion = op_since_1,                 \
        .GetEndVersion = op_any_version,               \
        __VA_ARGS__                                    \
    }

#endif
