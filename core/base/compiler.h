/*
 * Compiler helpers shared by core/ and preload/: branch hints, symbol visibility and the
 * named memory-ordering helpers that shared counters and flags use.
 */
#ifndef RSK_COMPILER_H
#define RSK_COMPILER_H

#define rsk_likely(x) __builtin_expect(!!(x), 1)
#define rsk_unlikely(x) __builtin_expect(!!(x), 0)

/* Symbols that leave librdmasock.so: the libc names and rdmasock_* (see preload/rdmasock.map). */
#define RSK_EXPORT __attribute__((visibility("default")))
/* On an extern declaration of a global that the pass-through paths read: the hidden preset
 * covers only definitions, so without it every read of the global from another file goes
 * through the GOT (two instructions instead of one). */
#define RSK_HIDDEN __attribute__((visibility("hidden")))

/* Busy-wait hint for bounded spins. */
static inline void rsk_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

#define RSK_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* Plain counters: nobody orders anything on them, they are only summed at the end. */
#define rsk_counter_add(p, v) __atomic_fetch_add((p), (v), __ATOMIC_RELAXED)
#define rsk_counter_read(p) __atomic_load_n((p), __ATOMIC_RELAXED)

/* Publication: a pointer stored with release is read with acquire (fd table slots). */
#define rsk_publish(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#define rsk_consume(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)

#endif
