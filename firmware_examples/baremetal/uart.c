/* uart.c -- the harness's polled debug-UART writer (no interrupts, no DMA).

   cuvil_board.h (generated from the board file's [uart] table) names the
   UART kind, its base address, the baud-rate register values cuvil-mcu
   computed, and the clock/pin set-up operations; cuvil_io_init() runs those,
   then enables the transmitter, so the same ELF prints on a real board and
   in Renode without anything poked from outside. Built without effect for
   semihosting (QEMU) firmware and for boards without a [uart] table. */
#include <stdint.h>

#include "cuvil_board.h"
#include "cuvil_io.h"

#if defined(CUVIL_UART_BASE) && !defined(CUVIL_SEMIHOSTING)

#define REG32(a) (*(volatile uint32_t *)(a))
#define UART(off) REG32(CUVIL_UART_BASE + (off))

static const uint32_t setup_ops[][4] = CUVIL_UART_SETUP; /* {op, address, mask, value} */

static void run_setup(void)
{
    uint32_t i;
    for (i = 0; i < sizeof setup_ops / sizeof setup_ops[0]; ++i) {
        const uint32_t *op = setup_ops[i];
        volatile uint32_t *reg = (volatile uint32_t *)op[1];
        if (op[0] == CUVIL_OP_SET) {
            *reg = (*reg & ~op[2]) | op[3];
        } else if (op[0] == CUVIL_OP_WRITE) {
            *reg = op[3];
        } else {
            while ((*reg & op[2]) != op[3]) {
            }
        }
        /* a peripheral clock enable takes effect a few bus cycles later (STM32 errata) */
        __asm__ volatile("dsb" ::: "memory");
    }
}

#if defined(CUVIL_UART_KIND_STM32_USART_SR)
static void uart_enable(void)
{
    UART(0x08u) = CUVIL_UART_BRR;             /* BRR */
    UART(0x0Cu) = (1u << 13) | (1u << 3);     /* CR1: UE, TE (8N1) */
}
static void uart_put(char c)
{
    while ((UART(0x00u) & (1u << 7)) == 0u) { /* SR.TXE */
    }
    UART(0x04u) = (uint32_t)(unsigned char)c; /* DR */
}
#elif defined(CUVIL_UART_KIND_STM32_USART_ISR) || defined(CUVIL_UART_KIND_STM32_LPUART)
static void uart_enable(void)
{
    UART(0x00u) = 0u;                         /* CR1: disabled while BRR is written */
    UART(0x0Cu) = CUVIL_UART_BRR;             /* BRR */
    UART(0x00u) = (1u << 3) | 1u;             /* CR1: TE, UE (8N1) */
}
static void uart_put(char c)
{
    while ((UART(0x1Cu) & (1u << 7)) == 0u) { /* ISR.TXE (TXFNF) */
    }
    UART(0x28u) = (uint32_t)(unsigned char)c; /* TDR */
}
#elif defined(CUVIL_UART_KIND_NRF52_UART)
static void uart_enable(void)
{
    UART(0x50Cu) = CUVIL_UART_PSEL;           /* PSEL.TXD (connected) */
    UART(0x524u) = CUVIL_UART_BAUDRATE;       /* BAUDRATE */
    UART(0x56Cu) = 0u;                        /* CONFIG: no parity, no flow control */
    UART(0x500u) = 4u;                        /* ENABLE: UART */
    UART(0x008u) = 1u;                        /* TASKS_STARTTX */
}
static void uart_put(char c)
{
    UART(0x11Cu) = 0u;                        /* EVENTS_TXDRDY */
    UART(0x51Cu) = (uint32_t)(unsigned char)c; /* TXD */
    while (UART(0x11Cu) == 0u) {
    }
}
#elif defined(CUVIL_UART_KIND_PL011)
static void uart_enable(void)
{
    UART(0x30u) = 0u;                         /* UARTCR: disabled */
    UART(0x24u) = CUVIL_UART_IBRD;            /* UARTIBRD */
    UART(0x28u) = CUVIL_UART_FBRD;            /* UARTFBRD */
    UART(0x2Cu) = (3u << 5) | (1u << 4);      /* UARTLCR_H: 8 bits, FIFOs on (also latches the divisors) */
    UART(0x30u) = (1u << 8) | 1u;             /* UARTCR: TXE, UARTEN */
}
static void uart_put(char c)
{
    while ((UART(0x18u) & (1u << 5)) != 0u) { /* UARTFR.TXFF */
    }
    UART(0x00u) = (uint32_t)(unsigned char)c; /* UARTDR */
}
#elif defined(CUVIL_UART_KIND_IMXRT_LPUART)
static void uart_enable(void)
{
    UART(0x18u) = 0u;                         /* CTRL: transmitter off while BAUD is written */
    UART(0x10u) = CUVIL_UART_BAUD;            /* BAUD: OSR, SBR */
    UART(0x18u) = 1u << 19;                   /* CTRL.TE (8N1) */
}
static void uart_put(char c)
{
    while ((UART(0x14u) & (1u << 23)) == 0u) { /* STAT.TDRE */
    }
    UART(0x1Cu) = (uint32_t)(unsigned char)c; /* DATA */
}
#else
#error "cuvil_board.h names no UART kind uart.c knows"
#endif

void cuvil_io_init(void)
{
    run_setup();
    uart_enable();
}

void cuvil_print(const char *s)
{
    for (; *s != '\0'; ++s) {
        if (*s == '\n') uart_put('\r'); /* serial terminals want CR LF */
        uart_put(*s);
    }
}

#else
typedef int cuvil_uart_unused; /* ISO C: a translation unit is not empty */
#endif
