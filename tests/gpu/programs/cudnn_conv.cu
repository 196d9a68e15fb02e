/* cuDNN 9, legacy (descriptor) API: 2D convolution forward with a fixed
 * algorithm (implicit GEMM) and with the heuristics' first choice, bias add,
 * ReLU, 2x2 max pooling and convolution backward-data.  Integer inputs, so
 * the fixed-algorithm results are exact; compared with the host. */
#include <cudnn.h>

#include <math.h>
#include <vector>

#include "test_util.h"

#define DNN(call)                                                            \
    do {                                                                     \
        cudnnStatus_t s_ = (call);                                           \
        if (s_ != CUDNN_STATUS_SUCCESS) {                                    \
            printf("FAIL line %d: %s -> %s\n", __LINE__, #call,              \
                   cudnnGetErrorString(s_));                                 \
            exit(1);                                                         \
        }                                                                    \
    } while (0)

/* NCHW input, KCRS filters, padding 1, stride 1: output N x K x H x W */
static const int N = 2, C = 3, H = 16, W = 16, K = 4, R = 3, S = 3, PAD = 1;

static float x_val(int n, int c, int h, int w) { return (float)(((n * 7 + c * 5 + h * 3 + w) % 5) - 2); }
static float w_val(int k, int c, int r, int s) { return (float)(((k * 3 + c * 2 + r * 5 + s * 7) % 3) - 1); }
static float b_val(int k) { return (float)(k - 2); }
static size_t at(int n, int c, int h, int w, int CC, int HH, int WW)
{
    return (((size_t)n * CC + c) * HH + h) * WW + w;
}

/* tol 0: exact; else relative to the largest reference magnitude */
static int compare(const std::vector<float> &got, const std::vector<double> &want, double tol,
                   const char *what)
{
    double sum = 0, err = 0, big = 1;
    for (size_t i = 0; i < want.size(); i++) {
        err = fmax(err, fabs(got[i] - want[i]));
        sum += want[i];
        big = fmax(big, fabs(want[i]));
    }
    if (tol == 0)
        printf("%s: %zu values, reference sum %.0f, first %g, exact\n", what, want.size(), sum,
               (double)got[0]);
    else
        printf("%s: %zu values, reference sum %.0f, within %g of the largest\n", what,
               want.size(), sum, tol);
    return err <= tol * big;
}

int main(void)
{
    const double t0 = now_s();
    cudnnHandle_t h;
    DNN(cudnnCreate(&h));
    fprintf(stderr, "cudnn version %zu\n", cudnnGetVersion());
    cudaStream_t stream;
    CHECK(cudaStreamCreate(&stream)); /* blocking: ordered after cudaMemcpy */
    DNN(cudnnSetStream(h, stream));

    std::vector<float> hx((size_t)N * C * H * W), hw((size_t)K * C * R * S), hb(K);
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++)
            for (int y = 0; y < H; y++)
                for (int x = 0; x < W; x++)
                    hx[at(n, c, y, x, C, H, W)] = x_val(n, c, y, x);
    for (int k = 0; k < K; k++)
        for (int c = 0; c < C; c++)
            for (int r = 0; r < R; r++)
                for (int s = 0; s < S; s++)
                    hw[at(k, c, r, s, C, R, S)] = w_val(k, c, r, s);
    for (int k = 0; k < K; k++)
        hb[k] = b_val(k);

    /* host references: conv, relu(conv + bias), maxpool, backward data */
    const size_t ysz = (size_t)N * K * H * W;
    std::vector<double> conv(ysz), act(ysz), pool((size_t)N * K * (H / 2) * (W / 2)),
        dx((size_t)N * C * H * W, 0.0);
    for (int n = 0; n < N; n++)
        for (int k = 0; k < K; k++)
            for (int y = 0; y < H; y++)
                for (int x = 0; x < W; x++) {
                    double s = 0;
                    for (int c = 0; c < C; c++)
                        for (int r = 0; r < R; r++)
                            for (int q = 0; q < S; q++) {
                                int iy = y + r - PAD, ix = x + q - PAD;
                                if (iy >= 0 && iy < H && ix >= 0 && ix < W)
                                    s += x_val(n, c, iy, ix) * w_val(k, c, r, q);
                            }
                    conv[at(n, k, y, x, K, H, W)] = s;
                    act[at(n, k, y, x, K, H, W)] = fmax(0.0, s + b_val(k));
                }
    for (int n = 0; n < N; n++)
        for (int k = 0; k < K; k++)
            for (int y = 0; y < H / 2; y++)
                for (int x = 0; x < W / 2; x++) {
                    double m = -1e30;
                    for (int dy = 0; dy < 2; dy++)
                        for (int dxx = 0; dxx < 2; dxx++)
                            m = fmax(m, act[at(n, k, 2 * y + dy, 2 * x + dxx, K, H, W)]);
                    pool[at(n, k, y, x, K, H / 2, W / 2)] = m;
                }
    /* backward data with dy = conv output (integers): dx = conv_transpose(dy, w) */
    for (int n = 0; n < N; n++)
        for (int k = 0; k < K; k++)
            for (int y = 0; y < H; y++)
                for (int x = 0; x < W; x++)
                    for (int c = 0; c < C; c++)
                        for (int r = 0; r < R; r++)
                            for (int q = 0; q < S; q++) {
                                int iy = y + r - PAD, ix = x + q - PAD;
                                if (iy >= 0 && iy < H && ix >= 0 && ix < W)
                                    dx[at(n, c, iy, ix, C, H, W)] +=
                                        conv[at(n, k, y, x, K, H, W)] * w_val(k, c, r, q);
                            }

    cudnnTensorDescriptor_t xd, yd, bd, pd;
    cudnnFilterDescriptor_t wd;
    cudnnConvolutionDescriptor_t cd;
    DNN(cudnnCreateTensorDescriptor(&xd));
    DNN(cudnnCreateTensorDescriptor(&yd));
    DNN(cudnnCreateTensorDescriptor(&bd));
    DNN(cudnnCreateTensorDescriptor(&pd));
    DNN(cudnnCreateFilterDescriptor(&wd));
    DNN(cudnnCreateConvolutionDescriptor(&cd));
    DNN(cudnnSetTensor4dDescriptor(xd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, N, C, H, W));
    DNN(cudnnSetFilter4dDescriptor(wd, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, K, C, R, S));
    DNN(cudnnSetConvolution2dDescriptor(cd, PAD, PAD, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION,
                                        CUDNN_DATA_FLOAT));
    DNN(cudnnSetConvolutionMathType(cd, CUDNN_FMA_MATH)); /* plain fp32, no TF32 */
    int on, oc, oh, ow;
    DNN(cudnnGetConvolution2dForwardOutputDim(cd, xd, wd, &on, &oc, &oh, &ow));
    printf("conv output dims %d x %d x %d x %d\n", on, oc, oh, ow);
    expect(on == N && oc == K && oh == H && ow == W, "output dimensions");
    DNN(cudnnSetTensor4dDescriptor(yd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, N, K, H, W));
    DNN(cudnnSetTensor4dDescriptor(bd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, K, 1, 1));
    DNN(cudnnSetTensor4dDescriptor(pd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, N, K, H / 2, W / 2));

    float *dX, *dW, *dB, *dY, *dA, *dP, *dDX;
    CHECK(cudaMalloc(&dX, hx.size() * sizeof(float)));
    CHECK(cudaMalloc(&dW, hw.size() * sizeof(float)));
    CHECK(cudaMalloc(&dB, hb.size() * sizeof(float)));
    CHECK(cudaMalloc(&dY, ysz * sizeof(float)));
    CHECK(cudaMalloc(&dA, ysz * sizeof(float)));
    CHECK(cudaMalloc(&dP, pool.size() * sizeof(float)));
    CHECK(cudaMalloc(&dDX, hx.size() * sizeof(float)));
    CHECK(cudaMemcpy(dX, hx.data(), hx.size() * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dW, hw.data(), hw.size() * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dB, hb.data(), hb.size() * sizeof(float), cudaMemcpyHostToDevice));

    const float one = 1.0f, zero = 0.0f;
    std::vector<float> out(ysz);

    /* forward, implicit GEMM */
    size_t ws_bytes = 0;
    const cudnnConvolutionFwdAlgo_t fixed = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
    DNN(cudnnGetConvolutionForwardWorkspaceSize(h, xd, wd, cd, yd, fixed, &ws_bytes));
    void *ws = NULL;
    size_t ws_cap = ws_bytes > (64u << 20) ? ws_bytes : (64u << 20);
    CHECK(cudaMalloc(&ws, ws_cap));
    DNN(cudnnConvolutionForward(h, &one, xd, dX, wd, dW, cd, fixed, ws, ws_bytes, &zero, yd, dY));
    CHECK(cudaMemcpyAsync(out.data(), dY, ysz * sizeof(float), cudaMemcpyDeviceToHost, stream));
    CHECK(cudaStreamSynchronize(stream));
    expect(compare(out, conv, 0, "conv fwd implicit gemm"), "conv forward (implicit GEMM) matches the host");

    /* forward, heuristics' first usable choice (may be FFT or Winograd: tolerance) */
    cudnnConvolutionFwdAlgoPerf_t perf[8];
    int nperf = 0;
    DNN(cudnnGetConvolutionForwardAlgorithm_v7(h, xd, wd, cd, yd, 8, &nperf, perf));
    int chosen = -1;
    for (int i = 0; i < nperf && chosen < 0; i++)
        if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= ws_cap)
            chosen = i;
    printf("conv heuristics offered a usable algorithm: %s\n", chosen >= 0 ? "yes" : "no");
    int heur_ok = 0;
    if (chosen >= 0) {
        fprintf(stderr, "heuristic algo %d, workspace %zu\n", (int)perf[chosen].algo, perf[chosen].memory);
        CHECK(cudaMemsetAsync(dA, 0, ysz * sizeof(float), stream));
        DNN(cudnnConvolutionForward(h, &one, xd, dX, wd, dW, cd, perf[chosen].algo, ws, ws_cap,
                                    &zero, yd, dA));
        CHECK(cudaMemcpyAsync(out.data(), dA, ysz * sizeof(float), cudaMemcpyDeviceToHost, stream));
        CHECK(cudaStreamSynchronize(stream));
        heur_ok = compare(out, conv, 1e-3, "conv fwd heuristic choice");
    }
    expect(heur_ok, "conv forward (heuristic algorithm) matches the host");

    /* bias add in place, then relu into dA */
    cudnnActivationDescriptor_t ad;
    DNN(cudnnCreateActivationDescriptor(&ad));
    DNN(cudnnSetActivationDescriptor(ad, CUDNN_ACTIVATION_RELU, CUDNN_PROPAGATE_NAN, 0.0));
    DNN(cudnnAddTensor(h, &one, bd, dB, &one, yd, dY));
    DNN(cudnnActivationForward(h, ad, &one, yd, dY, &zero, yd, dA));
    CHECK(cudaMemcpyAsync(out.data(), dA, ysz * sizeof(float), cudaMemcpyDeviceToHost, stream));
    CHECK(cudaStreamSynchronize(stream));
    expect(compare(out, act, 0, "relu(conv + bias)"), "bias add + relu match the host");

    /* 2x2 max pooling */
    cudnnPoolingDescriptor_t pooldesc;
    DNN(cudnnCreatePoolingDescriptor(&pooldesc));
    DNN(cudnnSetPooling2dDescriptor(pooldesc, CUDNN_POOLING_MAX, CUDNN_PROPAGATE_NAN, 2, 2, 0, 0, 2, 2));
    DNN(cudnnPoolingForward(h, pooldesc, &one, yd, dA, &zero, pd, dP));
    std::vector<float> pout(pool.size());
    CHECK(cudaMemcpyAsync(pout.data(), dP, pout.size() * sizeof(float), cudaMemcpyDeviceToHost, stream));
    CHECK(cudaStreamSynchronize(stream));
    expect(compare(pout, pool, 0, "maxpool 2x2"), "max pooling matches the host");

    /* backward data from dy = conv output, deterministic algorithm */
    DNN(cudnnConvolutionForward(h, &one, xd, dX, wd, dW, cd, fixed, ws, ws_bytes, &zero, yd, dY));
    size_t bwd_bytes = 0;
    const cudnnConvolutionBwdDataAlgo_t balgo = CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
    DNN(cudnnGetConvolutionBackwardDataWorkspaceSize(h, wd, yd, cd, xd, balgo, &bwd_bytes));
    int bwd_ok = 0;
    if (bwd_bytes <= ws_cap) {
        DNN(cudnnConvolutionBackwardData(h, &one, wd, dW, yd, dY, cd, balgo, ws, ws_cap, &zero, xd, dDX));
        std::vector<float> dxout(hx.size());
        CHECK(cudaMemcpyAsync(dxout.data(), dDX, dxout.size() * sizeof(float), cudaMemcpyDeviceToHost, stream));
        CHECK(cudaStreamSynchronize(stream));
        bwd_ok = compare(dxout, dx, 0, "conv backward data");
    }
    expect(bwd_ok, "conv backward data matches the host");

    DNN(cudnnDestroyPoolingDescriptor(pooldesc));
    DNN(cudnnDestroyActivationDescriptor(ad));
    DNN(cudnnDestroyConvolutionDescriptor(cd));
    DNN(cudnnDestroyFilterDescriptor(wd));
    DNN(cudnnDestroyTensorDescriptor(xd));
    DNN(cudnnDestroyTensorDescriptor(yd));
    DNN(cudnnDestroyTensorDescriptor(bd));
    DNN(cudnnDestroyTensorDescriptor(pd));
    DNN(cudnnDestroy(h));
    void *bufs[] = {dX, dW, dB, dY, dA, dP, dDX, ws};
    for (void *p : bufs)
        CHECK(cudaFree(p));
    CHECK(cudaStreamDestroy(stream));

    fprintf(stderr, "cudnn_conv: %.3f s\n", now_s() - t0);
    printf("%s cudnn_conv\n", failures ? "FAIL" : "PASS");
    return failures ? 1 : 0;
}
