/* boot2_rp2040.S -- RP2040 second-stage boot loader for the cuvil-mcu harness.

   The RP2040 boot ROM copies the first 256 bytes of flash to SRAM
   (0x20041F00), checks their CRC-32 (poly 0x04C11DB7, init 0xFFFFFFFF, not
   reflected, no final xor; stored in bytes 252..255) and runs them. This
   one sets the flash interface (XIP_SSI, 0x18000000) to plain serial 03h
   reads, which every QSPI flash supports (slower than quad I/O, and
   independent of the flash chip), then enters the image through its vector
   table at 0x10000100: VTOR, MSP, reset vector.

   cuvil-mcu ships the assembled bytes (cuvil_mcu/sim/rp2040.py, checked
   against this file by the tests) and writes them with their CRC into the
   generated boot2.c, so a project builds with nothing but arm-none-eabi-gcc. */
    .syntax unified
    .cpu cortex-m0plus
    .thumb
    .text
    .global cuvil_boot2
    .thumb_func
cuvil_boot2:
    ldr r3, =0x18000000     /* XIP_SSI */
    movs r1, #0
    str r1, [r3, #0x08]     /* SSIENR = 0: disable while configuring */
    movs r1, #4
    str r1, [r3, #0x14]     /* BAUDR = 4: clk_sys / 4 */
    ldr r1, =0x001F0300
    str r1, [r3, #0x00]     /* CTRLR0: 32-bit frames (DFS_32 = 31), TMOD = EEPROM read, standard SPI */
    ldr r1, =0x03000218
    ldr r2, =0x180000F4
    str r1, [r2]            /* SPI_CTRLR0: XIP command 0x03, 8-bit instruction, 24-bit address */
    movs r1, #0
    str r1, [r3, #0x04]     /* CTRLR1: NDF = 0, one word per XIP access */
    movs r1, #1
    str r1, [r3, #0x08]     /* SSIENR = 1 */
    ldr r0, =0x10000100     /* the image's vector table, right after these 256 bytes */
    ldr r1, =0xE000ED08
    str r0, [r1]            /* VTOR */
    ldmia r0!, {r1, r2}
    msr msp, r1             /* initial SP */
    bx r2                   /* reset vector */
    .align 2
    .ltorg
