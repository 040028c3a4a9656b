(* tests/unwind/vclock.ml — a program that reads the clock all the time
   (timeouts, rate limiting, logging timestamps): Unix.gettimeofday and
   Unix.time go through glibc into the kernel's vDSO.
   Usage: vclock.exe [SCALE] *)

let scale = if Array.length Sys.argv > 1 then float_of_string Sys.argv.(1) else 1.0
let rounds = max 1 (int_of_float (scale *. 30_000_000.))

let[@inline never] stamp acc i =
  if i land 1023 = 0 then acc +. Unix.time () else acc +. Unix.gettimeofday ()

let () =
  let acc = ref 0.0 in
  for i = 1 to rounds do acc := stamp !acc i done;
  Printf.printf "vclock: %d\n" (int_of_float !acc land 0xff)
