/* startup.c -- minimal Cortex-M start-up for the cuvil-mcu harness (M0 to M55).

   - vector table (.vectors, first in flash): initial SP, reset, faults, SysTick;
   - Reset_Handler: enables the FPU/MVE (CPACR) BEFORE any code the compiler
     may vectorize, copies .data from flash, zeroes .bss, paints the stack
     reserve (linker.ld: _sstack.._estack) with a pattern, calls main();
   - cuvil_stack_used(): the painted stack's high-water mark;
   - SysTick_Handler: counts 2^24-tick wraps for cuvil_ticks();
   - fault handlers print "CUVIL FAULT ..." and exit with code 3;
   - semihosting helpers (SYS_WRITE0, SYS_EXIT_EXTENDED), compiled only with
     -DCUVIL_SEMIHOSTING: on a board without a debugger attached a semihosting
     call faults, so real-board builds leave them out;
   - cuvil_entry: sets SP and jumps to Reset_Handler, for debuggers that
     load the ELF and start at its entry point instead of through the vector
     table (RAM images such as the i.MX RT one); Reset_Handler points VTOR at
     this vector table for the same reason;
   - weak cuvil_io_init (nothing) and cuvil_print: the debug-UART versions
     are in uart.c (boards with a [uart] table, built without semihosting). */
#include <stdint.h>

#include "cuvil_io.h"

extern uint32_t _sidata, _sdata, _edata, _sbss, _ebss, _sstack, _estack;
extern int main(void);

#define REG32(a) (*(volatile uint32_t *)(a))
#define SCB_CPACR REG32(0xE000ED88u)
#define SCB_ICSR  REG32(0xE000ED04u)
#define SCB_VTOR  REG32(0xE000ED08u)
#define SCB_CFSR  REG32(0xE000ED28u)
#define SYST_CSR  REG32(0xE000E010u)
#define SYST_RVR  REG32(0xE000E014u)
#define SYST_CVR  REG32(0xE000E018u)
#define ICSR_PENDSTSET (1u << 26)
#define SYST_RELOAD 0x00FFFFFFu
#define CUVIL_STACK_PAINT 0xC5AC5AC5u

void Reset_Handler(void);
void cuvil_entry(void);
void SysTick_Handler(void);
void Default_Handler(void);
void HardFault_Handler(void);

/* ---- semihosting ---- */
#ifdef CUVIL_SEMIHOSTING
#define SYS_WRITE0        0x04u
#define SYS_EXIT_EXTENDED 0x20u
#define ADP_Stopped_ApplicationExit 0x20026u

static uint32_t semihost(uint32_t op, const void *arg)
{
    register uint32_t r0 __asm__("r0") = op;
    register const void *r1 __asm__("r1") = arg;
    __asm__ volatile("bkpt 0xAB" : "+r"(r0) : "r"(r1) : "memory");
    return r0;
}
#endif

__attribute__((weak)) void cuvil_io_init(void)
{
}

__attribute__((weak)) void cuvil_print(const char *s)
{
#if defined(CUVIL_SEMIHOSTING)
    (void)semihost(SYS_WRITE0, s);
#else
    (void)s;
#endif
}

__attribute__((weak, noreturn)) void cuvil_exit(int code)
{
#ifdef CUVIL_SEMIHOSTING
    uint32_t block[2];
    block[0] = ADP_Stopped_ApplicationExit;
    block[1] = (uint32_t)code;
    (void)semihost(SYS_EXIT_EXTENDED, block);
#else
    (void)code;
#endif
    for (;;) {
        __asm__ volatile("wfi");
    }
}

/* ---- SysTick ---- */
static volatile uint32_t systick_wraps;

void SysTick_Handler(void)
{
    systick_wraps = systick_wraps + 1u;
}

void cuvil_ticks_start(void)
{
    SYST_CSR = 0u;
    SYST_RVR = SYST_RELOAD;
    SYST_CVR = 0u;
    systick_wraps = 0u;
    SYST_CSR = 7u; /* core clock, interrupt, enable */
    while (SYST_CVR == 0u) {
    }
}

uint64_t cuvil_ticks(void)
{
    uint32_t w1, w2, v, pend;
    do {
        w1 = systick_wraps;
        v = SYST_CVR;
        pend = SCB_ICSR & ICSR_PENDSTSET;
        w2 = systick_wraps;
    } while (w1 != w2);
    /* wrapped but the interrupt has not run yet: v was reloaded already */
    if (pend != 0u && v > SYST_RELOAD / 2u) w1 += 1u;
    return ((uint64_t)w1 << 24) + (uint64_t)(SYST_RELOAD - v);
}

/* ---- faults ---- */
static void print_hex32(const char *label, uint32_t v)
{
    static const char digits[] = "0123456789abcdef";
    char buf[24];
    int i, n = 0;
    while (label[n] != '\0' && n < 12) {
        buf[n] = label[n];
        ++n;
    }
    for (i = 7; i >= 0; --i) buf[n++] = digits[(v >> (4 * i)) & 0xFu];
    buf[n] = '\0';
    cuvil_print(buf);
}

void HardFault_Handler(void)
{
    uint32_t ipsr;
#ifdef CUVIL_TEST_LOCKUP
    __asm__ volatile("udf #1"); /* tests: a fault in the fault handler locks the core up */
#endif
    __asm__ volatile("mrs %0, ipsr" : "=r"(ipsr));
    cuvil_print("CUVIL FAULT");
    print_hex32(" exception ", ipsr & 0x1FFu);
#if !defined(__ARM_ARCH_6M__) && !defined(__ARM_ARCH_8M_BASE__)
    print_hex32(" cfsr ", SCB_CFSR);
#endif
    cuvil_print("\n");
    cuvil_exit(3);
}

void Default_Handler(void)
{
    HardFault_Handler();
}

/* ---- reset ---- */
typedef void (*cuvil_vector)(void);
extern const cuvil_vector cuvil_vector_table[16];

__attribute__((naked, noreturn)) void cuvil_entry(void)
{
    __asm__ volatile("ldr r0, =_estack\n\t"
                     "mov sp, r0\n\t"
                     "b Reset_Handler\n\t"
                     ".ltorg");
}

__attribute__((noreturn)) void Reset_Handler(void)
{
    /* volatile pointers: -O3 must not turn these loops into memcpy/memset
       calls or vector code (which would run before the FPU is enabled). */
    volatile uint32_t *src, *dst;
    int rc;
#if defined(__ARM_FP) || defined(__ARM_FEATURE_MVE)
    SCB_CPACR |= 0xFu << 20; /* CP10, CP11 full access: FPU (and MVE) */
    __asm__ volatile("dsb\n\tisb" ::: "memory");
#endif
    SCB_VTOR = (uint32_t)(uintptr_t)cuvil_vector_table;
    src = &_sidata;
    for (dst = &_sdata; dst < &_edata;) *dst++ = *src++;
    for (dst = &_sbss; dst < &_ebss;) *dst++ = 0u;
    {
        /* paint the stack reserve below this frame (64 bytes of headroom) */
        uint32_t here;
        volatile uint32_t *top = (volatile uint32_t *)((uintptr_t)&here & ~(uintptr_t)3u) - 16;
        for (dst = &_sstack; dst < top;) *dst++ = CUVIL_STACK_PAINT;
    }
    rc = main();
    cuvil_exit(rc);
}

uint32_t cuvil_stack_used(void)
{
    const volatile uint32_t *p = &_sstack;
    while (p < &_estack && *p == CUVIL_STACK_PAINT) ++p;
    return (uint32_t)((uintptr_t)&_estack - (uintptr_t)p);
}

/* 16 system vectors; device interrupts are not used by the harness. */
__attribute__((section(".vectors"), used)) const cuvil_vector cuvil_vector_table[16] = {
    (cuvil_vector)(uintptr_t)&_estack,
    Reset_Handler,
    Default_Handler,   /* NMI */
    HardFault_Handler, /* HardFault */
    Default_Handler,   /* MemManage */
    Default_Handler,   /* BusFault */
    Default_Handler,   /* UsageFault */
    Default_Handler,   /* SecureFault (ARMv8-M) */
    0, 0, 0,
    Default_Handler,   /* SVCall */
    Default_Handler,   /* DebugMonitor */
    0,
    Default_Handler,   /* PendSV */
    SysTick_Handler,
};
