/* kokoro.ConvInteger1d, an onnxruntime custom op: a 1-D integer convolution of uint8 activations by int8 weights,
 * y[n, o, t] = sum over tap k and channel c of (x[n, c, t + k * dilation - pad] - x_zero) * (w[k, c, o] - w_zero),
 * int32 out, exactly the integers of the derived graphs' im2col MatMulInteger (scripts/weights/stage_graphs.py).
 * There, each convolution is a Transpose to time-major, a Pad, a Gather of every tap's frames, the product and a
 * Transpose back: passes over memory that cost the generator as much as a third of its products (docs/engine.md).
 * Here the input is repacked once into groups of four channels interleaved along time, so that a tap is an offset
 * into the same rows (no im2col), and the products run on the CPU's 8-bit dot products (AVX-512 VNNI), 16 output
 * frames a register, written channel-major as they are made.
 * kokoro.ConvInteger1dScaled also takes the int32 bias and the float scale that follow the product in the graph, and
 * writes float(y + bias[o]) * scale: the same arithmetic as the Add, Cast and Mul it replaces, without their three
 * passes over the output. */
#include <cpuid.h>
#include <immintrin.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "onnxruntime_c_api.h"
#include "ops.h"

#define OUT_BLOCK 8   /* output channels a block */
#define TIME_VECTORS 3 /* 16-frame registers a block */
#define TIME_BLOCK (16 * TIME_VECTORS)

typedef struct {
    int64_t taps, dilation, pad_before, pad_after, channels, outs;
    int8_t *packed;       /* [outs / OUT_BLOCK][taps][channels / 4][OUT_BLOCK][4]: w - w_zero */
    int32_t *weight_sums; /* [outs]: the sum of each output channel's w - w_zero */
    int scaled;           /* ConvInteger1dScaled */
} Conv;

typedef struct {
    const Conv *conv;
    const uint8_t *x;
    uint8_t *rows; /* [n][channels / 4][row_len][4] */
    int32_t *y;      /* ConvInteger1d's output, or */
    float *y_scaled; /* ConvInteger1dScaled's, */
    const int32_t *bias; /* with its bias [outs] and scale (both made per run, from the input's scale) */
    float scale;
    int64_t length, out_length, row_len, time_blocks;
    int outs_inner; /* the order blocks are taken in (``compute``) */
    uint8_t x_zero;
} Job;

__attribute__((target("avx512f,avx512bw")))
static void pack_row(void *data, size_t index) {
    const Job *job = data;
    const Conv *conv = job->conv;
    const int64_t groups = conv->channels / 4, n = (int64_t)index / groups, group = (int64_t)index % groups;
    const int64_t length = job->length, before = conv->pad_before;
    const uint8_t *x = job->x + (n * conv->channels + 4 * group) * length;
    const uint8_t *r0 = x, *r1 = x + length, *r2 = x + 2 * length, *r3 = x + 3 * length;
    uint8_t *row = job->rows + ((size_t)index * job->row_len) * 4;
    memset(row, job->x_zero, (size_t)before * 4);
    uint8_t *out = row + before * 4;
    int64_t t = 0;
    for (; t + 16 <= length; t += 16, out += 64) {
        const __m128i a = _mm_loadu_si128((const __m128i *)(r0 + t)), b = _mm_loadu_si128((const __m128i *)(r1 + t));
        const __m128i c = _mm_loadu_si128((const __m128i *)(r2 + t)), d = _mm_loadu_si128((const __m128i *)(r3 + t));
        const __m128i ab_lo = _mm_unpacklo_epi8(a, b), ab_hi = _mm_unpackhi_epi8(a, b);
        const __m128i cd_lo = _mm_unpacklo_epi8(c, d), cd_hi = _mm_unpackhi_epi8(c, d);
        _mm_storeu_si128((__m128i *)out, _mm_unpacklo_epi16(ab_lo, cd_lo));
        _mm_storeu_si128((__m128i *)(out + 16), _mm_unpackhi_epi16(ab_lo, cd_lo));
        _mm_storeu_si128((__m128i *)(out + 32), _mm_unpacklo_epi16(ab_hi, cd_hi));
        _mm_storeu_si128((__m128i *)(out + 48), _mm_unpackhi_epi16(ab_hi, cd_hi));
    }
    for (; t < length; t++, out += 4) out[0] = r0[t], out[1] = r1[t], out[2] = r2[t], out[3] = r3[t];
    memset(out, job->x_zero, (size_t)(job->row_len - before - length) * 4);
}

__attribute__((target("avx512f,avx512bw,avx512vnni")))
static void conv_block(void *data, size_t index) {
    const Job *job = data;
    const Conv *conv = job->conv;
    const int64_t groups = conv->channels / 4, out_blocks = conv->outs / OUT_BLOCK;
    int64_t out_block, time_block, n;
    if (job->outs_inner) { /* a time block's input rows stay in the first-level cache while the weights stream */
        out_block = (int64_t)index % out_blocks, time_block = (int64_t)index / out_blocks % job->time_blocks;
    } else { /* an output block's weights stay there while its rows are written in order */
        time_block = (int64_t)index % job->time_blocks, out_block = (int64_t)index / job->time_blocks % out_blocks;
    }
    n = (int64_t)index / (out_blocks * job->time_blocks);
    const int32_t *w = (const int32_t *)(conv->packed + out_block * conv->taps * groups * OUT_BLOCK * 4);
    const uint8_t *first = job->rows + ((n * groups) * job->row_len + time_block * TIME_BLOCK) * 4;
    __m512i acc[OUT_BLOCK][TIME_VECTORS];
#pragma GCC unroll 8
    for (int j = 0; j < OUT_BLOCK; j++)
#pragma GCC unroll 3
        for (int i = 0; i < TIME_VECTORS; i++) acc[j][i] = _mm512_setzero_si512();
    for (int64_t k = 0; k < conv->taps; k++) {
        const uint8_t *row = first + k * conv->dilation * 4;
        for (int64_t g = 0; g < groups; g++, row += job->row_len * 4, w += OUT_BLOCK) {
            __m512i xs[TIME_VECTORS];
#pragma GCC unroll 3
            for (int i = 0; i < TIME_VECTORS; i++) xs[i] = _mm512_loadu_si512(row + 64 * i);
#pragma GCC unroll 8
            for (int j = 0; j < OUT_BLOCK; j++) {
                const __m512i wj = _mm512_set1_epi32(w[j]);
#pragma GCC unroll 3
                for (int i = 0; i < TIME_VECTORS; i++) acc[j][i] = _mm512_dpbusd_epi32(acc[j][i], xs[i], wj);
            }
        }
    }
    const int64_t t0 = time_block * TIME_BLOCK;
#pragma GCC unroll 8
    for (int j = 0; j < OUT_BLOCK; j++) {
        const int64_t o = out_block * OUT_BLOCK + j;
        const int32_t bias = job->bias != NULL ? job->bias[o] : 0;
        const __m512i offset = _mm512_set1_epi32((int32_t)((uint32_t)job->x_zero * (uint32_t)conv->weight_sums[o] -
                                                           (uint32_t)bias)); /* wrapping, as int32 sums do */
        const int64_t at = (n * conv->outs + o) * job->out_length + t0;
#pragma GCC unroll 3
        for (int i = 0; i < TIME_VECTORS; i++) {
            const int64_t left = job->out_length - t0 - 16 * i;
            if (left <= 0) break;
            const __mmask16 mask = left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);
            const __m512i value = _mm512_sub_epi32(acc[j][i], offset);
            if (job->y_scaled != NULL)
                _mm512_mask_storeu_ps(job->y_scaled + at + 16 * i, mask,
                                      _mm512_mul_ps(_mm512_cvtepi32_ps(value), _mm512_set1_ps(job->scale)));
            else
                _mm512_mask_storeu_epi32(job->y + at + 16 * i, mask, value);
        }
    }
}

static OrtStatus *ORT_API_CALL compute(void *kernel, OrtKernelContext *context) {
    const Conv *conv = kernel;
    const OrtValue *x, *x_zero;
    TRY(ort->KernelContext_GetInput(context, 0, &x));
    TRY(ort->KernelContext_GetInput(context, 2, &x_zero));
    int64_t dims[3] = {0, 0, 0};
    size_t rank;
    TRY(tensor_shape(x, dims, &rank, NULL));
    if (rank != 3 || dims[1] != conv->channels)
        return ort->CreateStatus(ORT_INVALID_ARGUMENT, "kokoro.ConvInteger1d: x must be [N, C, T] with the weights' C");
    Job job = {.conv = conv, .length = dims[2]};
    const int64_t reach = conv->dilation * (conv->taps - 1);
    job.out_length = dims[2] + conv->pad_before + conv->pad_after - reach;
    if (job.out_length < 0) job.out_length = 0;
    int64_t out_dims[3] = {dims[0], conv->outs, job.out_length};
    OrtValue *y;
    TRY(ort->KernelContext_GetOutput(context, 0, out_dims, 3, &y));
    if (dims[0] == 0 || job.out_length == 0) return NULL;
    const uint8_t *zero;
    TRY(ort->GetTensorMutableData((OrtValue *)x, (void **)&job.x));
    TRY(ort->GetTensorMutableData((OrtValue *)x_zero, (void **)&zero));
    job.x_zero = *zero;
    if (conv->scaled) {
        const OrtValue *bias, *scale;
        const float *value;
        int64_t bias_dims[3] = {0, 0, 0}, scale_dims[3] = {0, 0, 0};
        size_t bias_rank, scale_rank;
        TRY(ort->KernelContext_GetInput(context, 4, &bias));
        TRY(ort->KernelContext_GetInput(context, 5, &scale));
        TRY(tensor_shape(bias, bias_dims, &bias_rank, NULL));
        TRY(tensor_shape(scale, scale_dims, &scale_rank, NULL));
        if (bias_rank != 1 || bias_dims[0] != conv->outs || scale_rank != 0)
            return ort->CreateStatus(ORT_INVALID_ARGUMENT,
                                     "kokoro.ConvInteger1dScaled: the bias must be [O] and the scale one value");
        TRY(ort->GetTensorMutableData((OrtValue *)bias, (void **)&job.bias));
        TRY(ort->GetTensorMutableData((OrtValue *)scale, (void **)&value));
        job.scale = *value;
        TRY(ort->GetTensorMutableData(y, (void **)&job.y_scaled));
    } else {
        TRY(ort->GetTensorMutableData(y, (void **)&job.y));
    }
    job.time_blocks = (job.out_length + TIME_BLOCK - 1) / TIME_BLOCK;
    /* Which is faster depends on the output count (measured: docs/engine.md): with few output rows the input's
     * reuse wins, with many the writes in order do. */
    job.outs_inner = conv->outs <= 128;
    /* Every block's reads stay inside its row; at least the padded input, as time_blocks * TIME_BLOCK >= out_length. */
    job.row_len = job.time_blocks * TIME_BLOCK + reach;
    const size_t rows = (size_t)(dims[0] * conv->channels / 4);
    job.rows = aligned_alloc(64, (rows * (size_t)job.row_len * 4 + 63) / 64 * 64);
    if (job.rows == NULL) return ort->CreateStatus(ORT_FAIL, "kokoro.ConvInteger1d: out of memory");
    OrtStatus *status = ort->KernelContext_ParallelFor(context, pack_row, rows, 0, &job);
    if (status == NULL) {
        const size_t blocks = (size_t)(dims[0] * (conv->outs / OUT_BLOCK) * job.time_blocks);
        status = ort->KernelContext_ParallelFor(context, conv_block, blocks, 0, &job);
    }
    free(job.rows);
    return status;
}

static OrtStatus *attribute(const OrtKernelInfo *info, const char *key, int64_t *value) {
    return ort->KernelInfoGetAttribute_int64(info, key, value);
}

static OrtStatus *constant(const OrtKernelInfo *info, size_t index, const OrtValue **value) {
    int is_constant = 0;
    TRY(ort->KernelInfoGetConstantInput_tensor(info, index, &is_constant, value));
    if (!is_constant) return ort->CreateStatus(ORT_INVALID_ARGUMENT, "kokoro.ConvInteger1d: weights must be constant");
    return NULL;
}

static OrtStatus *pack_weights(Conv *conv, const OrtKernelInfo *info) {
    const OrtValue *weight, *weight_zero;
    TRY(constant(info, 1, &weight));
    TRY(constant(info, 3, &weight_zero));
    int64_t dims[3] = {0, 0, 0};
    size_t rank;
    TRY(tensor_shape(weight, dims, &rank, NULL));
    if (rank != 2 || dims[0] % conv->taps != 0 || (dims[0] / conv->taps) % 4 != 0 || dims[1] % OUT_BLOCK != 0)
        return ort->CreateStatus(ORT_INVALID_ARGUMENT,
                                 "kokoro.ConvInteger1d: weights must be [taps * C, O], C a multiple of 4, O of 8");
    conv->channels = dims[0] / conv->taps;
    conv->outs = dims[1];
    const int8_t *w, *zero;
    TRY(ort->GetTensorMutableData((OrtValue *)weight, (void **)&w));
    TRY(ort->GetTensorMutableData((OrtValue *)weight_zero, (void **)&zero));
    const int64_t groups = conv->channels / 4, outs = conv->outs;
    conv->packed = aligned_alloc(64, (size_t)(dims[0] * outs + 63) / 64 * 64);
    conv->weight_sums = calloc((size_t)outs, sizeof(int32_t));
    if (conv->packed == NULL || conv->weight_sums == NULL)
        return ort->CreateStatus(ORT_FAIL, "kokoro.ConvInteger1d: out of memory");
    int8_t *p = conv->packed;
    for (int64_t ob = 0; ob < outs / OUT_BLOCK; ob++)
        for (int64_t k = 0; k < conv->taps; k++)
            for (int64_t g = 0; g < groups; g++)
                for (int64_t j = 0; j < OUT_BLOCK; j++)
                    for (int64_t b = 0; b < 4; b++) {
                        const int64_t o = ob * OUT_BLOCK + j, row = k * conv->channels + 4 * g + b;
                        const int value = w[row * outs + o] - *zero;
                        if (value < -128 || value > 127)
                            return ort->CreateStatus(ORT_INVALID_ARGUMENT,
                                                     "kokoro.ConvInteger1d: a weight less its zero point is not int8");
                        *p++ = (int8_t)value;
                        conv->weight_sums[o] += value;
                    }
    return NULL;
}

static void ORT_API_CALL destroy_kernel(void *kernel) {
    Conv *conv = kernel;
    if (conv == NULL) return;
    free(conv->packed);
    free(conv->weight_sums);
    free(conv);
}

static OrtStatus *ORT_API_CALL create_kernel(const OrtCustomOp *op, const OrtApi *api, const OrtKernelInfo *info,
                                             void **kernel) {
    (void)api;
    Conv *conv = calloc(1, sizeof(Conv));
    if (conv == NULL) return ort->CreateStatus(ORT_FAIL, "kokoro.ConvInteger1d: out of memory");
    int64_t pads[2] = {-1, -1};
    size_t pad_count = 2;
    OrtStatus *status = attribute(info, "taps", &conv->taps);
    if (status == NULL) status = attribute(info, "dilation", &conv->dilation);
    if (status == NULL) status = ort->KernelInfoGetAttributeArray_int64(info, "pads", pads, &pad_count);
    if (status == NULL && pad_count != 2)
        status = ort->CreateStatus(ORT_INVALID_ARGUMENT, "kokoro.ConvInteger1d: pads must be [before, after]");
    conv->pad_before = pads[0], conv->pad_after = pads[1];
    if (status == NULL && (conv->taps < 1 || conv->dilation < 1 || conv->pad_before < 0 || conv->pad_after < 0))
        status = ort->CreateStatus(ORT_INVALID_ARGUMENT, "kokoro.ConvInteger1d: bad taps, dilation or pads");
    if (status == NULL) status = pack_weights(conv, info);
    conv->scaled = op == &conv_integer_1d_scaled;
    if (status != NULL) {
        destroy_kernel(conv);
        return status;
    }
    *kernel = conv;
    return NULL;
}

static const char *ORT_API_CALL name(const OrtCustomOp *op) {
    return op == &conv_integer_1d_scaled ? "ConvInteger1dScaled" : "ConvInteger1d";
}
static ONNXTensorElementDataType ORT_API_CALL input_type(const OrtCustomOp *op, size_t index) {
    (void)op;
    static const ONNXTensorElementDataType types[] = {
        ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8, ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8,  ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8,
        ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8,  ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32, ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT,
    };
    return types[index];
}
static ONNXTensorElementDataType ORT_API_CALL output_type(const OrtCustomOp *op, size_t index) {
    (void)index;
    return op == &conv_integer_1d_scaled ? ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT : ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32;
}
static size_t ORT_API_CALL input_count(const OrtCustomOp *op) { return op == &conv_integer_1d_scaled ? 6 : 4; }

#define CONV_OP                                                                                                  \
    KOKORO_CPU_OP(.GetName = name, .GetInputType = input_type, .GetInputTypeCount = input_count,                  \
                  .GetOutputType = output_type, .CreateKernelV2 = create_kernel, .KernelComputeV2 = compute,      \
                  .KernelDestroy = destroy_kernel)
const OrtCustomOp conv_integer_1d = CONV_OP;
const OrtCustomOp conv_integer_1d_scaled = CONV_OP;

/* Whether the kernel serves this CPU: it needs AVX-512 with VNNI, and where the CPU has AMX, onnxruntime's own
 * product (MLAS's AMX kernel, three times VNNI's peak) serves the graph's function better. */
int conv_integer_1d_runs_here(void) {
    __builtin_cpu_init();
    unsigned int eax, ebx, ecx, edx;
    const int amx = __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) && (edx >> 25 & 1); /* AMX-INT8 */
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vnni") && !amx;
}
