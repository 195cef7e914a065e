//go:build !purego

#include "textflag.h"

// Folding constants for the bit-reflected CRC-32 (IEEE): for a fold of a
// 128-bit lane T bits forward, the low quadword is x^(T+32) mod P and the
// high quadword x^(T-32) mod P, each bit-reflected and shifted left by one
// (x^n mod P for P = 0x104C11DB7; TestCRCUpdate fails if one is wrong).
DATA fold2048<>+0(SB)/8, $0x11542778a
DATA fold2048<>+8(SB)/8, $0x1322d1430
GLOBL fold2048<>(SB), RODATA|NOPTR, $16

DATA fold512<>+0(SB)/8, $0x154442bd4
DATA fold512<>+8(SB)/8, $0x1c6e41596
GLOBL fold512<>(SB), RODATA|NOPTR, $16

// FOLD replaces each 128-bit lane of acc by its fold with the constants in
// Z0, XORed with next: acc = lo(acc)*lo(K) ^ hi(acc)*hi(K) ^ next.
#define FOLD(acc, tmp, next) \
	VPCLMULQDQ $0x00, Z0, acc, tmp \
	VPCLMULQDQ $0x11, Z0, acc, acc \
	VPTERNLOGD $0x96, next, tmp, acc

DATA fold128<>+0(SB)/8, $0x1751997d0
DATA fold128<>+8(SB)/8, $0x0ccaa009e
GLOBL fold128<>(SB), RODATA|NOPTR, $16

// finish: k1 = x^96 mod P and k2 = x^64 mod P (reflected, k2 shifted left
// by one), then the Barrett constants mu = x^64 div P and P, reflected.
DATA finK<>+0(SB)/8, $0x0ccaa009e
DATA finK<>+8(SB)/8, $0x163cd6124
GLOBL finK<>(SB), RODATA|NOPTR, $16

DATA barK<>+0(SB)/8, $0x1f7011641
DATA barK<>+8(SB)/8, $0x1db710641
GLOBL barK<>(SB), RODATA|NOPTR, $16

DATA low32<>+0(SB)/8, $0xffffffff
DATA low32<>+8(SB)/8, $0
GLOBL low32<>(SB), RODATA|NOPTR, $16

// FOLD128 folds the 128-bit acc onto next, 128 bits on: acc = fold(acc) ^ next.
#define FOLD128(acc, tmp, next) \
	VPCLMULQDQ $0x00, X0, acc, tmp \
	VPCLMULQDQ $0x11, X0, acc, acc \
	VPXOR tmp, acc, acc \
	VPXOR next, acc, acc

// REDUCE folds Z1 into Z2, Z2 into Z3 and Z3 into Z4 (512 bits apart), then
// the four 128-bit lanes of the result into the last, and returns that lane
// (16 bytes whose CRC from a zero register is the input's), reduced by
// FINISH to that CRC register in AX.
#define REDUCE \
	VBROADCASTI32X4 fold512<>(SB), Z0 \
	FOLD(Z1, Z5, Z2) \
	FOLD(Z1, Z5, Z3) \
	FOLD(Z1, Z5, Z4) \
	VEXTRACTI32X4 $1, Z1, X2 \
	VEXTRACTI32X4 $2, Z1, X3 \
	VEXTRACTI32X4 $3, Z1, X4 \
	VMOVDQU fold128<>(SB), X0 \
	FOLD128(X1, X5, X2) \
	FOLD128(X1, X5, X3) \
	FOLD128(X1, X5, X4) \
	FINISH \
	VZEROUPPER

// FINISH reduces the 128-bit X1 (16 bytes of message) to the CRC register
// those bytes leave from a zero register, in AX: the first quadword is
// folded onto the second (x^96), the 32 bits above 64 onto the rest (x^64),
// and the 64 bits left are reduced by Barrett's method.
#define FINISH \
	VMOVDQU finK<>(SB), X6 \
	VMOVDQU low32<>(SB), X9 \
	VMOVDQU barK<>(SB), X10 \
	VPCLMULQDQ $0x00, X6, X1, X7 \
	VPSRLDQ $8, X1, X2 \
	VPXOR X2, X7, X7 \
	VPSRLDQ $4, X7, X3 \
	VPAND X9, X7, X8 \
	VPCLMULQDQ $0x10, X6, X8, X8 \
	VPXOR X8, X3, X3 \
	VPAND X9, X3, X8 \
	VPCLMULQDQ $0x00, X10, X8, X8 \
	VPAND X9, X8, X8 \
	VPCLMULQDQ $0x10, X10, X8, X8 \
	VPXOR X8, X3, X3 \
	VPEXTRD $1, X3, AX

// func foldAVX512(s uint32, p *byte, n int) uint32
TEXT ·foldAVX512(SB), NOSPLIT, $0-28
	MOVL s+0(FP), AX
	MOVQ p+8(FP), SI
	MOVQ n+16(FP), CX
	VMOVD AX, X0
	VMOVDQU64 0(SI), Z1
	VPXORQ Z0, Z1, Z1
	VMOVDQU64 64(SI), Z2
	VMOVDQU64 128(SI), Z3
	VMOVDQU64 192(SI), Z4
	VBROADCASTI32X4 fold2048<>(SB), Z0
	ADDQ $256, SI
	SUBQ $256, CX
	JZ   done

loop:
	VMOVDQU64 0(SI), Z9
	VMOVDQU64 64(SI), Z10
	VMOVDQU64 128(SI), Z11
	VMOVDQU64 192(SI), Z12
	FOLD(Z1, Z5, Z9)
	FOLD(Z2, Z6, Z10)
	FOLD(Z3, Z7, Z11)
	FOLD(Z4, Z8, Z12)
	ADDQ $256, SI
	SUBQ $256, CX
	JNZ  loop

done:
	REDUCE
	MOVL AX, ret+24(FP)
	RET

// func foldCopyAVX512(s uint32, dst, src *byte, n int) uint32 is
// foldAVX512 over src that also stores each 64 bytes it loads to dst: the
// copy rides on the fold's loads.
TEXT ·foldCopyAVX512(SB), NOSPLIT, $0-36
	MOVL s+0(FP), AX
	MOVQ dst+8(FP), DI
	MOVQ src+16(FP), SI
	MOVQ n+24(FP), CX
	VMOVD AX, X0
	VMOVDQU64 0(SI), Z1
	VMOVDQU64 64(SI), Z2
	VMOVDQU64 128(SI), Z3
	VMOVDQU64 192(SI), Z4
	VMOVDQU64 Z1, 0(DI)
	VMOVDQU64 Z2, 64(DI)
	VMOVDQU64 Z3, 128(DI)
	VMOVDQU64 Z4, 192(DI)
	VPXORQ Z0, Z1, Z1
	VBROADCASTI32X4 fold2048<>(SB), Z0
	ADDQ $256, SI
	ADDQ $256, DI
	SUBQ $256, CX
	JZ   cdone

cloop:
	VMOVDQU64 0(SI), Z9
	VMOVDQU64 64(SI), Z10
	VMOVDQU64 128(SI), Z11
	VMOVDQU64 192(SI), Z12
	VMOVDQU64 Z9, 0(DI)
	VMOVDQU64 Z10, 64(DI)
	VMOVDQU64 Z11, 128(DI)
	VMOVDQU64 Z12, 192(DI)
	FOLD(Z1, Z5, Z9)
	FOLD(Z2, Z6, Z10)
	FOLD(Z3, Z7, Z11)
	FOLD(Z4, Z8, Z12)
	ADDQ $256, SI
	ADDQ $256, DI
	SUBQ $256, CX
	JNZ  cloop

cdone:
	REDUCE
	MOVL AX, ret+32(FP)
	RET

// func cpuid(leaf, sub uint32) (a, b, c, d uint32)
TEXT ·cpuid(SB), NOSPLIT, $0-24
	MOVL leaf+0(FP), AX
	MOVL sub+4(FP), CX
	CPUID
	MOVL AX, a+8(FP)
	MOVL BX, b+12(FP)
	MOVL CX, c+16(FP)
	MOVL DX, d+20(FP)
	RET

// func xgetbv0() uint32
TEXT ·xgetbv0(SB), NOSPLIT, $0-4
	MOVL $0, CX
	XGETBV
	MOVL AX, ret+0(FP)
	RET
