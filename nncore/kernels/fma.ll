; acc += s * b on 16-wide f32 vectors as one fused multiply-add (nncore/kernels/fma.py says why).
; Assemble with: llvm-as nncore/kernels/fma.ll -o nncore/kernels/fma.bc   (LLVM <= 15, Taichi 1.7's version)
target datalayout = "e-m:e-p270:32:32-p271:32:32-p272:64:64-i64:64-f80:128-n8:16:32:64-S128"

declare <16 x float> @llvm.fma.v16f32(<16 x float>, <16 x float>, <16 x float>)

define void @nncore_fma16(<16 x float>* %acc, float* %s, <16 x float>* %b) alwaysinline {
  %x = load <16 x float>, <16 x float>* %acc
  %a = load float, float* %s
  %v = insertelement <16 x float> undef, float %a, i32 0
  %splat = shufflevector <16 x float> %v, <16 x float> undef, <16 x i32> zeroinitializer
  %bv = load <16 x float>, <16 x float>* %b
  %r = call <16 x float> @llvm.fma.v16f32(<16 x float> %splat, <16 x float> %bv, <16 x float> %x)
  store <16 x float> %r, <16 x float>* %acc
  ret void
}

; acc += a * b, all three 16-wide vectors (products summed along a vector's lanes).
define void @nncore_fma16vv(<16 x float>* %acc, <16 x float>* %a, <16 x float>* %b) alwaysinline {
  %x = load <16 x float>, <16 x float>* %acc
  %av = load <16 x float>, <16 x float>* %a
  %bv = load <16 x float>, <16 x float>* %b
  %r = call <16 x float> @llvm.fma.v16f32(<16 x float> %av, <16 x float> %bv, <16 x float> %x)
  store <16 x float> %r, <16 x float>* %acc
  ret void
}
