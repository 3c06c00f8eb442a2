/*
 * Credit-based flow control of the two-sided stream protocol. A credit is one receive
 * buffer the peer has posted for us; every SEND spends one. Credits go back in the 32-bit
 * immediate of any message (piggybacked on data), or in a credit-only message once half
 * the window is owed and nothing flows back. One credit is always kept back from data so
 * that a credit-only message can always be sent: two senders can never deadlock.
 *
 * Immediate layout: bits 0-15 credits returned, bits 16-23 flags, bits 24-31 a fixed tag
 * (a message without it is garbage from a broken peer and resets the connection).
 */
#ifndef RSK_CREDIT_H
#define RSK_CREDIT_H

#include <stdint.h>

#define RSK_IMM_TAG 0xa5u
#define RSK_IMM_FIN 0x01u /* no more data after this message */
#define RSK_IMM_RST 0x02u /* abortive close: discard and report ECONNRESET */
#define RSK_IMM_FLAGS_KNOWN (RSK_IMM_FIN | RSK_IMM_RST)
#define RSK_CREDIT_MAX 0xffffu

static inline uint32_t rsk_imm_make(uint32_t credits, uint32_t flags)
{
	return (RSK_IMM_TAG << 24) | ((flags & 0xffu) << 16) | (credits & RSK_CREDIT_MAX);
}

static inline uint32_t rsk_imm_credits(uint32_t imm)
{
	return imm & RSK_CREDIT_MAX;
}

static inline uint32_t rsk_imm_flags(uint32_t imm)
{
	return (imm >> 16) & 0xffu;
}

/* Well-formed: right tag, no unknown flag. */
static inline int rsk_imm_valid(uint32_t imm)
{
	return (imm >> 24) == RSK_IMM_TAG && (rsk_imm_flags(imm) & ~RSK_IMM_FLAGS_KNOWN) == 0;
}

/* May data be sent with @credits in hand? (the last one is reserved for credit updates) */
static inline int rsk_credit_can_send_data(uint32_t credits)
{
	return credits > 1;
}

/* Should a credit-only message go now? (half the window owed; needs any credit, even the
 * reserved one) */
static inline int rsk_credit_should_return(uint32_t owed, uint32_t nbuf, uint32_t credits)
{
	return owed > 0 && owed >= nbuf / 2 && credits > 0;
}

#endif
