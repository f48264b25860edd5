/* cuvil_io.h -- what the bare-metal harness (main.c) needs from startup.c:
   printing, exiting and a SysTick-based tick counter. */
#ifndef CUVIL_IO_H_INCLUDED
#define CUVIL_IO_H_INCLUDED

#include <stdint.h>

/* Print a NUL-terminated string. Weak in startup.c: semihosting SYS_WRITE0
   when built with -DCUVIL_SEMIHOSTING, a polled UART data register with
   -DCUVIL_UART_BASE=0x...; otherwise it does nothing -- define your own
   cuvil_print (e.g. HAL_UART_Transmit) to see the results. */
void cuvil_print(const char *s);

/* End the program: semihosting SYS_EXIT_EXTENDED (QEMU exits with `code`),
   otherwise sleep forever. Weak. */
void cuvil_exit(int code);

/* Start SysTick (24-bit, core clock, reload 0xFFFFFF) and wait for its
   first non-zero value: QEMU reads 0 until the first reload. */
void cuvil_ticks_start(void);

/* SysTick ticks since cuvil_ticks_start(), wraps counted in the SysTick
   interrupt. Under QEMU -icount shift=0 one tick is a fixed number of
   instructions (the board file's insn_per_tick). */
uint64_t cuvil_ticks(void);

/* Bytes of the stack reserve (linker.ld) used so far: startup.c paints it
   at reset and this finds the deepest word overwritten. Equal to the whole
   reserve when the stack has run past it. */
uint32_t cuvil_stack_used(void);

#endif /* CUVIL_IO_H_INCLUDED */
