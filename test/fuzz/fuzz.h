/*
 * Shared by the fuzz targets (test/fuzz/fuzz_*.c): a reader over the fuzzer's input that
 * never fails (past the end it yields zeros), and the invariant check that turns a broken
 * invariant into a crash the fuzzer (or the corpus replay) reports.
 *
 * Each target defines LLVMFuzzerTestOneInput. Built with -DRSK_FUZZ=ON and clang, libFuzzer
 * drives it; in the default build replay.c's main() runs it over the target's corpus.
 */
#ifndef RSK_FUZZ_H
#define RSK_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
/* Optional, once before the first input (libFuzzer's hook; replay.c calls it too). */
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

struct fz {
	const uint8_t *p;
	size_t left;
};

static inline int fz_done(const struct fz *f)
{
	return f->left == 0;
}

static inline uint8_t fz_u8(struct fz *f)
{
	if (f->left == 0)
		return 0;
	f->left--;
	return *f->p++;
}

static inline uint16_t fz_u16(struct fz *f)
{
	return (uint16_t)(fz_u8(f) | (unsigned int)fz_u8(f) << 8);
}

static inline uint32_t fz_u32(struct fz *f)
{
	return fz_u16(f) | (uint32_t)fz_u16(f) << 16;
}

/* Up to @n bytes of input into @out (the rest zeroed); returns how many came from it. */
static inline size_t fz_bytes(struct fz *f, void *out, size_t n)
{
	size_t k = n < f->left ? n : f->left;

	memcpy(out, f->p, k);
	memset((char *)out + k, 0, n - k);
	f->p += k;
	f->left -= k;
	return k;
}

/* An invariant of the code under test: abort (the fuzzer's crash) with where and what. */
#define FZ_CHECK(cond)                                                                             \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__, __LINE__, #cond); \
			abort();                                                                   \
		}                                                                                  \
	} while (0)

#endif
