/* cuvil_io.h -- what the bare-metal harness (main.c) needs from startup.c:
   printing, exiting and a SysTick-based tick counter. */
#ifndef CUVIL_IO_H_INCLUDED
#define CUVIL_IO_H_INCLUDED

#include <stdint.h>

/* Set up what cuvil_print needs: uart.c enables the board's debug UART
   (clocks, pins, baud rate) from cuvil_board.h; weak no-op in startup.c. */
void cuvil_io_init(void);

/* Print a NUL-terminated string: uart.c's polled UART writer on boards with
   a [uart] table; otherwise the weak one in startup.c -- semihosting
   SYS_WRITE0 with -DCUVIL_SEMIHOSTING, else nothing (define your own, e.g.
   HAL_UART_Transmit, to see the results). */
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
