/* The kokoro custom-op domain, registered by SessionOptions.register_custom_ops_library: the fused Snake
 * activation everywhere, the direct integer convolution where it serves the CPU (and the caller has not turned it
 * off). A graph node whose op is not registered runs the model-local function the derived graphs carry for it. */
#include "onnxruntime_c_api.h"
#include "ops.h"

#define EXPORTED __attribute__((visibility("default")))

const OrtApi *ort;
static int conv_wanted = 1;

/* Whether sessions registered from now on get kokoro.ConvInteger1d: 0 turns it off (KOKORO_DIRECT_CONV=0). */
EXPORTED void kokoro_want_conv_integer_1d(int wanted) { conv_wanted = wanted; }

/* Whether this CPU is one the kernel serves. */
EXPORTED int kokoro_conv_integer_1d_serves_this_cpu(void) { return conv_integer_1d_runs_here(); }

OrtStatus *tensor_shape(const OrtValue *value, int64_t dims[3], size_t *rank, size_t *count) {
    OrtTensorTypeAndShapeInfo *info;
    TRY(ort->GetTensorTypeAndShape(value, &info));
    OrtStatus *status = ort->GetDimensionsCount(info, rank);
    if (status == NULL && *rank <= 3) status = ort->GetDimensions(info, dims, *rank);
    if (status == NULL && count != NULL) status = ort->GetTensorShapeElementCount(info, count);
    ort->ReleaseTensorTypeAndShapeInfo(info);
    return status;
}

const char *ORT_API_CALL op_on_cpu_provider(const OrtCustomOp *op) { (void)op; return "CPUExecutionProvider"; }
size_t ORT_API_CALL op_one_output(const OrtCustomOp *op) { (void)op; return 1; }
OrtCustomOpInputOutputCharacteristic ORT_API_CALL op_required(const OrtCustomOp *op, size_t index) {
    (void)op, (void)index;
    return INPUT_OUTPUT_REQUIRED;
}
OrtMemType ORT_API_CALL op_in_cpu_memory(const OrtCustomOp *op, size_t index) {
    (void)op, (void)index;
    return OrtMemTypeDefault;
}
int ORT_API_CALL op_since_1(const OrtCustomOp *op) { (void)op; return 1; }
int ORT_API_CALL op_any_version(const OrtCustomOp *op) { (void)op; return 2147483647; }

EXPORTED OrtStatus *ORT_API_CALL RegisterCustomOps(OrtSessionOptions *options, const OrtApiBase *base) {
    ort = base->GetApi(ORT_API_VERSION);
    if (ort == NULL) return NULL; /* unreachable: every runtime since 1.21 serves this version */
    OrtCustomOpDomain *domain;
    TRY(ort->CreateCustomOpDomain("kokoro", &domain));
    TRY(ort->CustomOpDomain_Add(domain, &snake));
    if (conv_wanted && conv_integer_1d_runs_here()) {
        TRY(ort->CustomOpDomain_Add(domain, &conv_integer_1d));
        TRY(ort->CustomOpDomain_Add(domain, &conv_integer_1d_scaled));
    }
    return ort->AddCustomOpDomain(options, domain);
}
