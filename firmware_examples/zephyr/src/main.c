/* One inference of a cuvil-mcu model on Zephyr: fill input 0 with a fixed
   pattern, run, print output 0 (in thousandths: printk has no %f) with its
   arg max, and the time of model_run in cycles and microseconds.

   Works with any model generated with `--name model --emit zephyr`: the
   element types come from the header's macros. Further inputs, if any, keep
   the arena's contents (zero in .bss at boot). */
#include <zephyr/kernel.h>
#include <zephyr/sys/printk.h>
#include <zephyr/sys/time_units.h>

#include "cuvil_model.h"

#define SHOW 16 /* output values printed */

/* value k of the input pattern: -1.0 .. 1.0 in steps of 1/8 */
static float pattern(int32_t k)
{
    return (float)((k % 17) - 8) / 8.0f;
}

static void fill_input(void)
{
    model_input_0_t *in = (model_input_0_t *)model_input(model_arena, 0);
    int32_t k;
    for (k = 0; k < (int32_t)MODEL_INPUT_0_SIZE; ++k) {
#if MODEL_INPUT_0_DTYPE == MODEL_DTYPE_FLOAT32
        in[k] = pattern(k);
#elif defined(MODEL_INPUT_0_SCALE)
        in[k] = model_input_0_quantize(pattern(k));
#else
        in[k] = (model_input_0_t)(k % 17);
#endif
    }
}

/* output value k, in thousandths */
static int32_t output_milli(const model_output_0_t *out, int32_t k)
{
#if MODEL_OUTPUT_0_DTYPE == MODEL_DTYPE_FLOAT32
    float v = out[k];
#elif defined(MODEL_OUTPUT_0_SCALE)
    float v = model_output_0_dequantize(out[k]);
#else
    float v = (float)out[k];
#endif
    return (int32_t)lrintf(v * 1000.0f);
}

int main(void)
{
    const model_output_0_t *out;
    uint32_t t0, cycles;
    int32_t k, best = 0;
    int status;

    fill_input();
    t0 = k_cycle_get_32();
    status = model_run(model_arena);
    cycles = k_cycle_get_32() - t0;
    if (status != MODEL_OK) {
        printk("model_run failed: %s\n", model_status_str(status));
        return 0;
    }
    out = (const model_output_0_t *)model_output(model_arena, 0);
    printk("output 0 (%u values, x1000):", (unsigned)MODEL_OUTPUT_0_SIZE);
    for (k = 0; k < (int32_t)MODEL_OUTPUT_0_SIZE; ++k) {
        if (k < SHOW) {
            printk(" %d", (int)output_milli(out, k));
        }
        if (output_milli(out, k) > output_milli(out, best)) {
            best = k;
        }
    }
    printk("%s\n", MODEL_OUTPUT_0_SIZE > SHOW ? " ..." : "");
    printk("argmax %d\n", (int)best);
    printk("model_run: %u cycles, %u us\n", (unsigned)cycles, (unsigned)k_cyc_to_us_floor32(cycles));
    return 0;
}
