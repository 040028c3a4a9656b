(* tests/unwind/minicc.ml — a small compiler, the shape of real ones:
   source text generated per module, a lexer over the string, a
   recursive-descent parser to an AST, a type checker with Map
   environments and exceptions for errors, constant folding, code
   generation for a stack machine with label resolution in a Hashtbl, and
   an interpreter that runs the result.
   Usage: minicc.exe [SCALE] *)

module SM = Map.Make (String)

let scale = if Array.length Sys.argv > 1 then float_of_string Sys.argv.(1) else 1.0
let modules = max 1 (int_of_float (scale *. 100.))

(* --- source ---------------------------------------------------------- *)
let gen_source seed =
  let b = Buffer.create 4096 in
  let st = ref seed in
  let rnd n = st := (!st * 1103515245 + 12345) land 0x3fffffff; !st mod n in
  let rec expr d vars =
    if d = 0 || rnd 4 = 0 then
      (if vars <> [] && rnd 2 = 0 then List.nth vars (rnd (List.length vars)) else string_of_int (rnd 100))
    else match rnd 5 with
      | 0 -> Printf.sprintf "(%s + %s)" (expr (d - 1) vars) (expr (d - 1) vars)
      | 1 -> Printf.sprintf "(%s * %s)" (expr (d - 1) vars) (expr (d - 1) vars)
      | 2 -> Printf.sprintf "(if %s < %s then %s else %s)" (expr (d - 1) vars) (expr (d - 1) vars)
               (expr (d - 1) vars) (expr (d - 1) vars)
      | 3 -> let v = Printf.sprintf "v%d" (rnd 1000) in
        Printf.sprintf "(let %s = %s in %s)" v (expr (d - 1) vars) (expr (d - 1) (v :: vars))
      | _ -> Printf.sprintf "(%s - %s)" (expr (d - 1) vars) (expr (d - 1) vars) in
  for i = 1 to 40 do
    Buffer.add_string b (Printf.sprintf "def f%d(a, b) = %s;\n" i (expr 7 [ "a"; "b" ]))
  done;
  Buffer.contents b

(* --- lexer ----------------------------------------------------------- *)
type tok = INT of int | ID of string | KW of string | SYM of char | EOF

let keywords = [ "def"; "let"; "in"; "if"; "then"; "else" ]

let[@inline never] lex s =
  let n = String.length s and toks = ref [] and i = ref 0 in
  while !i < n do
    let c = s.[!i] in
    if c = ' ' || c = '\n' then incr i
    else if c >= '0' && c <= '9' then begin
      let j = ref !i in
      while !j < n && s.[!j] >= '0' && s.[!j] <= '9' do incr j done;
      toks := INT (int_of_string (String.sub s !i (!j - !i))) :: !toks; i := !j
    end else if (c >= 'a' && c <= 'z') then begin
      let j = ref !i in
      while !j < n && (match s.[!j] with 'a' .. 'z' | '0' .. '9' | '_' -> true | _ -> false) do incr j done;
      let w = String.sub s !i (!j - !i) in
      toks := (if List.exists (String.equal w) keywords then KW w else ID w) :: !toks; i := !j
    end else (toks := SYM c :: !toks; incr i)
  done;
  Array.of_list (List.rev (EOF :: !toks))

(* --- parser ---------------------------------------------------------- *)
type expr = Int of int | Var of string | Bin of char * expr * expr | If of expr * expr * expr * expr
          | Let of string * expr * expr
type def = { name : string; params : string list; body : expr }

exception Syntax of int

let[@inline never] parse toks =
  let p = ref 0 in
  let peek () = toks.(!p) and adv () = incr p in
  let expect t = if peek () = t then adv () else raise (Syntax !p) in
  let ident () = match peek () with ID s -> adv (); s | _ -> raise (Syntax !p) in
  let rec expr () =
    match peek () with
    | INT n -> adv (); Int n
    | ID s -> adv (); Var s
    | SYM '(' -> adv ();
        let e = (match peek () with
          | KW "if" -> adv (); let a = expr () in expect (SYM '<'); let b = expr () in
            expect (KW "then"); let c = expr () in expect (KW "else"); If (a, b, c, expr ())
          | KW "let" -> adv (); let v = ident () in expect (SYM '='); let e1 = expr () in
            expect (KW "in"); Let (v, e1, expr ())
          | _ -> let a = expr () in
            (match peek () with SYM (('+' | '-' | '*') as op) -> adv (); Bin (op, a, expr ())
                               | _ -> raise (Syntax !p))) in
        expect (SYM ')'); e
    | _ -> raise (Syntax !p) in
  let defs = ref [] in
  while peek () <> EOF do
    expect (KW "def");
    let name = ident () in
    expect (SYM '(');
    let a = ident () in expect (SYM ','); let b = ident () in expect (SYM ')');
    expect (SYM '=');
    let body = expr () in
    expect (SYM ';');
    defs := { name; params = [ a; b ]; body } :: !defs
  done;
  List.rev !defs

(* --- checking and folding -------------------------------------------- *)
exception Unbound of string

let[@inline never] rec check env = function
  | Int _ -> ()
  | Var v -> if not (SM.mem v env) then raise (Unbound v)
  | Bin (_, a, b) -> check env a; check env b
  | If (a, b, c, d) -> check env a; check env b; check env c; check env d
  | Let (v, e, body) -> check env e; check (SM.add v () env) body

let rec fold = function
  | Bin (op, a, b) -> (match op, fold a, fold b with
      | '+', Int x, Int y -> Int (x + y) | '-', Int x, Int y -> Int (x - y)
      | '*', Int x, Int y -> Int (x * y) | '+', Int 0, e | '+', e, Int 0 -> e
      | '*', Int 1, e | '*', e, Int 1 -> e | op, a, b -> Bin (op, a, b))
  | If (a, b, c, d) -> (match fold a, fold b with
      | Int x, Int y -> if x < y then fold c else fold d
      | a, b -> If (a, b, fold c, fold d))
  | Let (v, e, body) -> Let (v, fold e, fold body)
  | e -> e

(* --- code generation and the machine --------------------------------- *)
type ins = Push of int | Load of int | Store of int | Op of char | Jlt of string | Jmp of string
         | Label of string | Ret

let[@inline never] codegen d =
  let code = ref [] and lbl = ref 0 in
  let emit i = code := i :: !code in
  let slots = Hashtbl.create 16 in
  List.iteri (fun i p -> Hashtbl.replace slots p i) d.params;
  let rec go env = function
    | Int n -> emit (Push n)
    | Var v -> emit (Load (SM.find v env))
    | Bin (op, a, b) -> go env a; go env b; emit (Op op)
    | If (a, b, c, e) ->
        incr lbl; let lt = Printf.sprintf "%s_t%d" d.name !lbl and le = Printf.sprintf "%s_e%d" d.name !lbl in
        go env a; go env b; emit (Jlt lt); go env e; emit (Jmp le); emit (Label lt); go env c; emit (Label le)
    | Let (v, e, body) ->
        let s = Hashtbl.length slots in
        Hashtbl.replace slots (v ^ "#" ^ string_of_int s) s;
        go env e; emit (Store s); go (SM.add v s env) body in
  go (List.fold_left (fun m p -> SM.add p (Hashtbl.find slots p) m) SM.empty d.params) d.body;
  emit Ret;
  Array.of_list (List.rev !code)

let[@inline never] run code a b =
  let labels = Hashtbl.create 16 in
  Array.iteri (fun i ins -> match ins with Label l -> Hashtbl.replace labels l i | _ -> ()) code;
  let regs = Array.make 4096 0 and st = Array.make 4096 0 and sp = ref 0 and pc = ref 0 and res = ref None in
  regs.(0) <- a; regs.(1) <- b;
  let push v = st.(!sp) <- v; incr sp and pop () = decr sp; st.(!sp) in
  while !res = None do
    (match code.(!pc) with
     | Push n -> push n | Load s -> push regs.(s) | Store s -> regs.(s) <- pop ()
     | Op op -> let y = pop () in let x = pop () in
       push (match op with '+' -> x + y | '-' -> x - y | _ -> (x * y) land 0xffff)
     | Jlt l -> let y = pop () in let x = pop () in if x < y then pc := Hashtbl.find labels l
     | Jmp l -> pc := Hashtbl.find labels l
     | Label _ -> () | Ret -> res := Some (pop ()));
    incr pc
  done;
  Option.get !res

let () =
  let acc = ref 0 in
  for m = 1 to modules do
    let defs = parse (lex (gen_source m)) in
    List.iter (fun d ->
        (try check (List.fold_left (fun e p -> SM.add p () e) SM.empty d.params) d.body
         with Unbound v -> failwith ("unbound " ^ v));
        let code = codegen { d with body = fold d.body } in
        acc := !acc + run code m (m + 1))
      defs
  done;
  Printf.printf "minicc: %d\n" (!acc land 0xffff)
