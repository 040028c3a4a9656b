(* split.ml — e2e program: one domain, three work functions whose CPU share is
   50/30/20 by construction. Each round calls work_a, work_b and work_c (in an
   order that varies) with iteration counts in the ratio 5:3:2 and the same
   loop body, so any drift of the machine's speed hits all three alike. The checker (test_e2e.py) asserts each
   function's inclusive share of the samples under [run_rounds].
   Usage: split.exe [PERCENT]  (amount of work, default 100 = ~4 s) *)

let unit_iters = 600_000

(* The three bodies are identical on purpose; [@inline never] keeps one frame
   per function so the profile can attribute samples to it. *)
let[@inline never] work_a n =
  let acc = ref 1 in
  for i = 1 to n do
    acc := (!acc * 1103515245 + i) land 0x3fffffff
  done;
  !acc

let[@inline never] work_b n =
  let acc = ref 1 in
  for i = 1 to n do
    acc := (!acc * 1103515245 + i) land 0x3fffffff
  done;
  !acc

let[@inline never] work_c n =
  let acc = ref 1 in
  for i = 1 to n do
    acc := (!acc * 1103515245 + i) land 0x3fffffff
  done;
  !acc

(* The order of the three calls changes from round to round (a fixed LCG):
   a program whose rhythm is an exact multiple of the kernel tick would
   otherwise be sampled at the same phases every round, and any sampling
   profiler tied to the tick (the timer engine) would see a biased split. *)
let orders = [| [| 0; 1; 2 |]; [| 0; 2; 1 |]; [| 1; 0; 2 |]; [| 1; 2; 0 |]; [| 2; 0; 1 |]; [| 2; 1; 0 |] |]

let[@inline never] run_rounds rounds =
  let sum = ref 0 and seed = ref 12345 in
  for _ = 1 to rounds do
    seed := (!seed * 1103515245 + 12345) land 0x3fffffff;
    let order = orders.((!seed lsr 16) mod 6) in
    for step = 0 to 2 do
      match order.(step) with
      | 0 -> sum := (!sum + work_a (5 * unit_iters)) land 0xffffff
      | 1 -> sum := (!sum + work_b (3 * unit_iters)) land 0xffffff
      | _ -> sum := (!sum + work_c (2 * unit_iters)) land 0xffffff
    done
  done;
  !sum

let () =
  let percent = if Array.length Sys.argv > 1 then int_of_string Sys.argv.(1) else 100 in
  let rounds = max 1 (500 * percent / 100) in
  Printf.printf "split: rounds=%d result=%d\n" rounds (run_rounds rounds)
