/* kokoro.Snake, an onnxruntime custom op: y = x + b * sin(a * x)^2 over x [N, C, T], a and b one value per channel
 * (Kokoro's generator: b = 1 / a). The derived generator graphs hold each of their 48 Snake activations as one such
 * node, with a model-local function of the same five operators that onnxruntime inlines where this library is not
 * registered (scripts/weights/stage_graphs.py). Here the chain is one pass over memory, and sin runs vectorised
 * (glibc's libmvec) on the session's intra-op threads, where onnxruntime's own Sin runs on one thread
 * (docs/engine.md). Built by container/native/build.py against onnxruntime's C API header. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "onnxruntime_c_api.h"
#include "ops.h"

typedef struct {
    const float *x, *a, *b;
    float *y;
    int64_t channels, length;
} Rows;

/* One row (one batch item's channel). Cloned per instruction set: the loader picks the widest the CPU has. */
__attribute__((target_clones("avx512f", "avx2", "default")))
static void snake_row(void *data, size_t row) {
    const Rows *r = data;
    const int64_t c = (int64_t)row % r->channels, t_len = r->length;
    const float a = r->a[c], b = r->b[c];
    const float *x = r->x + (int64_t)row * t_len;
    float *y = r->y + (int64_t)row * t_len;
#pragma omp simd
    for (int64_t t = 0; t < t_len; t++) {
        const float s = sinf(a * x[t]);
        y[t] = x[t] + b * (s * s);
    }
}

static OrtStatus *ORT_API_CALL compute(void *kernel, OrtKernelContext *context) {
    (void)kernel;
    const OrtValue *x, *a, *b;
    TRY(ort->KernelContext_GetInput(context, 0, &x));
    TRY(ort->KernelContext_GetInput(context, 1, &a));
    TRY(ort->KernelContext_GetInput(context, 2, &b));
    int64_t dims[3] = {0, 0, 0}, unused[3];
    size_t rank, count, a_count, b_count, other_rank;
    TRY(tensor_shape(x, dims, &rank, &count));
    TRY(tensor_shape(a, unused, &other_rank, &a_count));
    TRY(tensor_shape(b, unused, &other_rank, &b_count));
    if (rank != 3 || (int64_t)a_count != dims[1] || (int64_t)b_count != dims[1])
        return ort->CreateStatus(ORT_INVALID_ARGUMENT, "kokoro.Snake: x must be [N, C, T], a and b C values each");
    OrtValue *y;
    TRY(ort->KernelContext_GetOutput(context, 0, dims, 3, &y));
    Rows rows = {.channels = dims[1], .length = dims[2]};
    TRY(ort->GetTensorMutableData((OrtValue *)x, (void **)&rows.x));
    TRY(ort->GetTensorMutableData((OrtValue *)a, (void **)&rows.a));
    TRY(ort->GetTensorMutableData((OrtValue *)b, (void **)&rows.b));
    TRY(ort->GetTensorMutableData(y, (void **)&rows.y));
    if (count == 0) return NULL;
    return ort->KernelContext_ParallelFor(context, snake_row, (size_t)(dims[0] * dims[1]), 0, &rows);
}

static OrtStatus *ORT_API_CALL create_kernel(const OrtCustomOp *op, const OrtApi *api, const OrtKernelInfo *info,
                                             void **kernel) {
    (void)op, (void)api, (void)info;
    *kernel = (void *)&ort; /* stateless: any non-null handle */
    return NULL;
}
static void ORT_API_CALL destroy_kernel(void *kernel) { (void)kernel; }
static const char *ORT_API_CALL name(const OrtCustomOp *op) { (void)op; return "Snake"; }
static ONNXTensorElementDataType ORT_API_CALL float_type(const OrtCustomOp *op, size_t index) {
    (void)op, (void)index;
    return ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
}
static size_t ORT_API_CALL three(const OrtCustomOp *op) { (void)op; return 3; }

const OrtCustomOp snake = KOKORO_CPU_OP(.GetName = name, .GetInputType = float_type, .GetInputTypeCount = three,
                                         .GetOutputType = float_type, .CreateKernelV2 = create_kernel,
                                         .KernelComputeV2 = compute, .KernelDestroy = destroy_kernel);
