@ Firmware whose HardFault vector is 0 (not a Thumb address): its first fault
@ cannot be taken and the CPU locks up. The runner must report that as a fault.
@ Linked by the test: .vectors at 0x10000000 (ITCM), .text after it.
.syntax unified
.thumb
.section .vectors, "a"
.word 0x30001000            @ initial SP, in DTCM
.word reset + 1             @ reset
.word 0                     @ NMI
.word 0                     @ HardFault: not a Thumb address
.text
.thumb_func
reset:
  ldr r0, =0x0C000000       @ nothing answers here: BusFault, escalated to HardFault
  ldr r0, [r0]
  b .
