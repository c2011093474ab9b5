@ kiln_insn_loop(n): returns 3 * n after exactly 3 * n + 3 instructions (n >= 1):
@ one before the loop, three per iteration (the last bne falls through), two after.
@ tests/fvp/test_instruction_count.py checks the plugin's count against that formula.
.syntax unified
.thumb
.text
.global kiln_insn_loop
.type kiln_insn_loop, %function
.thumb_func
kiln_insn_loop:
  movs r1, #0
1:
  adds r1, r1, #3
  subs r0, r0, #1
  bne 1b
  mov r0, r1
  bx lr
.size kiln_insn_loop, . - kiln_insn_loop
