/* main.c -- bare-metal harness around a generated model.h.

   For every embedded sample (samples.c): copy its inputs into the arena,
   run one inference between two SysTick reads, and print

       S <sample> <ticks>                         (hex: 8 and 16 digits)
       T <sample> <microseconds> us               (decimal; boards whose file states the harness clock)
       O <sample> <output> <index> <values>       (hex: 8, 2, 8 digits, then up to 64 bytes of values)
       K <stack bytes used>                       (hex; high-water mark, startup.c)
       CUVIL DONE

   O records are fixed-width: every value is printed as its bit pattern,
   most significant digit first, in twice its size in hex digits (int8 "ff"
   is -1, float32 "3f800000" is 1.0f), so outputs compare exactly, floats
   included; <index> is the first element of the record.

   then return 0 (startup.c turns that into cuvil_exit(0)). A failed
   model_run prints "CUVIL ERROR ..." and returns 2. Printing goes through
   cuvil_print() (uart.c: the board's debug UART; startup.c: semihosting or
   your own definition), set up first by cuvil_io_init().

   cuvil-mcu writes this file next to model.h (`gen --board ...`, `sim`),
   renaming model_/MODEL_ to the --name prefix. */
#include <stdint.h>
#include <string.h>

/* Placement of the arena and the weights (see model.h, "Hooks"). E.g. the
   arena in the Cortex-M7's DTCM, a section the linker script places first in
   RAM (linker.ld: .dtcm):
#define MODEL_ARENA_ATTR __attribute__((section(".dtcm"), aligned(16)))
   or the weights in a flash section of your own:
#define MODEL_WEIGHTS_ATTR __attribute__((section(".ext_flash"), aligned(16)))
*/
#define MODEL_IMPLEMENTATION
#include "model.h"
#include "cuvil_io.h"
#include "cuvil_board.h"

/* samples.c */
extern const uint32_t cuvil_num_samples;
extern const unsigned char *const cuvil_samples[]; /* [sample * MODEL_NUM_INPUTS + input] */
extern const uint32_t cuvil_input_bytes[];
extern const uint32_t cuvil_output_bytes[];
extern const uint32_t cuvil_output_elem[]; /* bytes per element */

static unsigned char arena[MODEL_ARENA_SIZE] MODEL_ARENA_ATTR;

static char *put_hex(char *p, uint32_t v, int digits)
{
    static const char hex[] = "0123456789abcdef";
    int i;
    for (i = digits - 1; i >= 0; --i) *p++ = hex[(v >> (4 * i)) & 0xFu];
    return p;
}

static void print_line_head(char tag, uint32_t sample, int output, char *line, char **end)
{
    char *p = line;
    *p++ = tag;
    *p++ = ' ';
    p = put_hex(p, sample, 8);
    if (output >= 0) {
        *p++ = ' ';
        p = put_hex(p, (uint32_t)output, 2);
        *p++ = ' ';
    }
    *end = p;
}

/* Up to 64 bytes of values a record; each value's bytes most significant
   first (the target is little-endian): its bit pattern in hex. */
static void print_output(uint32_t sample, int index, const unsigned char *bytes, uint32_t n, uint32_t elem)
{
    char line[24 + 9 + 2 * 64 + 2];
    char *p;
    uint32_t i = 0, j, k;
    do {
        print_line_head('O', sample, index, line, &p);
        p = put_hex(p, i / elem, 8);
        *p++ = ' ';
        for (j = 0; j < 64u && i < n; j += elem, i += elem) {
            for (k = elem; k > 0u; --k) p = put_hex(p, bytes[i + k - 1u], 2);
        }
        *p++ = '\n';
        *p = '\0';
        cuvil_print(line);
    } while (i < n);
}

#ifdef CUVIL_CLOCK_HZ
static char *put_dec(char *p, uint64_t v)
{
    char tmp[20];
    int n = 0;
    do {
        tmp[n++] = (char)('0' + (int)(v % 10u));
        v /= 10u;
    } while (v != 0u);
    while (n > 0) *p++ = tmp[--n];
    return p;
}
#endif

int main(void)
{
    char line[40];
    char *p;
    uint32_t s;
    uint64_t t0, t1;
    int i, status;

    cuvil_io_init();
    cuvil_ticks_start();
    for (s = 0; s < cuvil_num_samples; ++s) {
        for (i = 0; i < MODEL_NUM_INPUTS; ++i) {
            memcpy(model_input(arena, i), cuvil_samples[s * (uint32_t)MODEL_NUM_INPUTS + (uint32_t)i],
                   cuvil_input_bytes[i]);
        }
        t0 = cuvil_ticks();
        status = model_run(arena);
        t1 = cuvil_ticks();
        if (status != MODEL_OK) {
            cuvil_print("CUVIL ERROR model_run: ");
            cuvil_print(model_status_str(status));
            cuvil_print("\n");
            return 2;
        }
        print_line_head('S', s, -1, line, &p);
        *p++ = ' ';
        p = put_hex(p, (uint32_t)((t1 - t0) >> 32), 8);
        p = put_hex(p, (uint32_t)(t1 - t0), 8);
        *p++ = '\n';
        *p = '\0';
        cuvil_print(line);
#ifdef CUVIL_CLOCK_HZ
        print_line_head('T', s, -1, line, &p);
        *p++ = ' ';
        p = put_dec(p, (t1 - t0) * 1000000u / CUVIL_CLOCK_HZ);
        *p++ = ' ';
        *p++ = 'u';
        *p++ = 's';
        *p++ = '\n';
        *p = '\0';
        cuvil_print(line);
#endif
        for (i = 0; i < MODEL_NUM_OUTPUTS; ++i) {
            print_output(s, i, (const unsigned char *)model_output(arena, i), cuvil_output_bytes[i],
                         cuvil_output_elem[i]);
        }
    }
#ifdef CUVIL_TEST_FAULT
    /* tests: an undefined instruction faults (UsageFault -> HardFault) */
    __asm__ volatile("udf #0");
#endif
#ifdef CUVIL_TEST_HANG
    for (;;) {
    }
#endif
    line[0] = 'K';
    line[1] = ' ';
    p = put_hex(line + 2, cuvil_stack_used(), 8);
    *p++ = '\n';
    *p = '\0';
    cuvil_print(line);
    cuvil_print("CUVIL DONE\n");
    return 0;
}
